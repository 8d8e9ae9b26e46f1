#include "runtime/backend/cpu/im2col.h"

#include <algorithm>
#include <cstring>

#include <Eigen/Core>

namespace dp::cpu {

namespace {

// Output positions [lo, hi) whose input position o*stride + offset lies in [0, in).
struct OutputRange {
  int64_t lo, hi, offset;
};

OutputRange valid_outputs(int64_t in, int64_t out, int64_t offset, int64_t stride) {
  const int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  const int64_t hi = in - offset <= 0 ? 0 : (in - offset + stride - 1) / stride;
  return {std::min(lo, out), std::clamp(hi, std::min(lo, out), out), offset};
}

// For kernel row kh / column kw: the output rows / columns that read inside the image, and the
// input position of output 0 (negative: padding).
OutputRange valid_rows(const Im2colGeometry& g, int64_t kh) {
  return valid_outputs(g.H, g.OH, kh * g.p.dilation_h - g.p.pad_h, g.p.stride_h);
}
OutputRange valid_columns(const Im2colGeometry& g, int64_t kw) {
  return valid_outputs(g.W, g.OW, kw * g.p.dilation_w - g.p.pad_w, g.p.stride_w);
}

// Stride 1 and output as wide as the input ("same" width, e.g. 3×3 with padding 1): a column
// row is then the input plane shifted by one offset, so the valid rows move as one block and
// only the border columns (taps in the left/right padding) need fixing.
bool is_shifted_plane(const Im2colGeometry& g) { return g.p.stride_h == 1 && g.p.stride_w == 1 && g.OW == g.W; }

// Calls fn(c, rows, cols, row) for every kernel tap, row = the tap's column-matrix row index.
template <typename Fn>
void for_each_tap(const Im2colGeometry& g, Fn&& fn) {
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) fn(c, valid_rows(g, kh), valid_columns(g, kw), (c * g.KH + kh) * g.KW + kw);
}

// For a shifted plane: the block of the column row [begin, end) (valid rows) maps to input
// elements begin + shift of the plane; clipped to the plane, which only drops border columns.
struct Block {
  int64_t begin, end, shift;
};

Block shifted_block(const Im2colGeometry& g, const OutputRange& rows, const OutputRange& cols) {
  const int64_t shift = rows.offset * g.W + cols.offset;
  const int64_t plane = g.H * g.W;
  return {std::max(rows.lo * g.OW, -shift), std::min(rows.hi * g.OW, plane - shift), shift};
}

}  // namespace

TapRange live_taps(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  TapRange live{kernel, 0};
  for (int64_t k = 0; k < kernel; ++k) {
    const OutputRange r = valid_outputs(in, out, k * dilation - pad, stride);
    if (r.hi > r.lo) live = {std::min(live.lo, k), k + 1};
  }
  return live.hi > live.lo ? live : TapRange{0, 0};
}

TapRange outputs_inside(int64_t in, int64_t out, int64_t tap, int64_t stride, int64_t pad, int64_t dilation) {
  const OutputRange r = valid_outputs(in, out, tap * dilation - pad, stride);
  return {r.lo, r.hi};
}

template <typename T>
void im2col(const T* x, const Im2colGeometry& g, T* col, int64_t ld_col) {
  const bool shifted = is_shifted_plane(g);
  const int64_t sw = g.p.stride_w, sh = g.p.stride_h;
  for_each_tap(g, [&](int64_t c, OutputRange rows, OutputRange cols, int64_t r) {
    T* row = col + r * ld_col;
    const T* in = x + c * g.H * g.W;
    std::fill(row, row + rows.lo * g.OW, T(0));
    std::fill(row + rows.hi * g.OW, row + g.OH * g.OW, T(0));
    if (shifted) {
      const Block b = shifted_block(g, rows, cols);
      if (b.end > b.begin) std::memcpy(row + b.begin, in + b.begin + b.shift, (b.end - b.begin) * sizeof(T));
      for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
        std::fill(row + oh * g.OW, row + oh * g.OW + cols.lo, T(0));
        std::fill(row + oh * g.OW + cols.hi, row + (oh + 1) * g.OW, T(0));
      }
      return;
    }
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      T* out = row + oh * g.OW;
      const T* src = in + (oh * sh + rows.offset) * g.W + cols.offset;
      std::fill(out, out + cols.lo, T(0));
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) out[ow] = src[ow * sw];
      std::fill(out + cols.hi, out + g.OW, T(0));
    }
  });
}

template <typename T>
void col2im_add(T* col, int64_t ld_col, const Im2colGeometry& g, T* dx) {
  const bool shifted = is_shifted_plane(g);
  const int64_t sw = g.p.stride_w, sh = g.p.stride_h;
  for_each_tap(g, [&](int64_t c, OutputRange rows, OutputRange cols, int64_t r) {
    T* row = col + r * ld_col;
    T* out = dx + c * g.H * g.W;
    if (shifted) {
      // Zero the border columns (taps in the padding) so the block add can run straight through.
      for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
        std::fill(row + oh * g.OW, row + oh * g.OW + cols.lo, T(0));
        std::fill(row + oh * g.OW + cols.hi, row + (oh + 1) * g.OW, T(0));
      }
      const Block b = shifted_block(g, rows, cols);
      T* dst = out + b.shift;
      for (int64_t i = b.begin; i < b.end; ++i) dst[i] += row[i];
      return;
    }
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      const T* src = row + oh * g.OW;
      T* dst = out + (oh * sh + rows.offset) * g.W + cols.offset;
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) dst[ow * sw] += src[ow];
    }
  });
}

template void im2col<float>(const float*, const Im2colGeometry&, float*, int64_t);
template void im2col<double>(const double*, const Im2colGeometry&, double*, int64_t);
template void im2col<Eigen::bfloat16>(const Eigen::bfloat16*, const Im2colGeometry&, Eigen::bfloat16*, int64_t);
template void col2im_add<float>(float*, int64_t, const Im2colGeometry&, float*);
template void col2im_add<double>(double*, int64_t, const Im2colGeometry&, double*);

}  // namespace dp::cpu
