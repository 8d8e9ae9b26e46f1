// im2col and its adjoint col2im for one group of one image, NCHW: the column layout that turns a
// convolution into a GEMM. Several images share one column matrix side by side (ld_col = the
// row length of the whole matrix), so small feature maps still give the GEMM wide operands.
#pragma once

#include <cstdint>

#include "runtime/backend/backend.h"

namespace dp::cpu {

// One image group's convolution geometry: `channels` input planes of H×W, a KH×KW kernel.
struct Im2colGeometry {
  int64_t channels, H, W;
  int64_t KH, KW;
  int64_t OH, OW;
  Conv2dParams p;
  int64_t rows() const { return channels * KH * KW; }
  int64_t columns() const { return OH * OW; }
};

// The kernel taps [lo, hi) along one dimension that land inside the input (`in` long) for at
// least one of the `out` output positions; the others only ever see padding. Empty (lo == hi)
// when none does.
struct TapRange {
  int64_t lo, hi;
};
TapRange live_taps(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation);

// The output positions [lo, hi) at which kernel tap `tap` reads inside the input (output o reads
// input o*stride + tap*dilation - pad); empty when the tap only ever sees padding.
TapRange outputs_inside(int64_t in, int64_t out, int64_t tap, int64_t stride, int64_t pad, int64_t dilation);

// col [channels*KH*KW, OH*OW] (row r starts at col + r*ld_col) from x [channels, H, W];
// taps that fall in the padding are 0.
template <typename T>
void im2col(const T* x, const Im2colGeometry& g, T* col, int64_t ld_col);

// dx [channels, H, W] += col scattered back: the adjoint of im2col (taps in the padding dropped).
// col is scratch: its padding taps may be overwritten with zeros.
template <typename T>
void col2im_add(T* col, int64_t ld_col, const Im2colGeometry& g, T* dx);

}  // namespace dp::cpu
