// Host side of strided element loops: a tensor view's (shape, strides) turned into the merged
// StridedShape the kernels walk (kernel_types.h).
#pragma once

#include <array>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/error.h"
#include "runtime/core/shape.h"

namespace dp::cuda {

// The loop shape of `sizes` over N operands: size-1 dims dropped, and each dim merged into the
// next-inner one where it continues it in every operand (stride == inner size * inner stride),
// so a contiguous or simply-sliced tensor becomes one or two dims. `op` names the caller in the
// error for more than kMaxDims dims that cannot be merged.
template <int N>
StridedShape<N> make_strided_shape(const char* op, const Shape& sizes, const std::array<const Shape*, N>& strides) {
  StridedShape<N> out;
  int nd = 0;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    bool continues_inner = nd > 0;
    for (int k = 0; k < N && continues_inner; ++k)
      continues_inner = (*strides[k])[d] == out.sizes[nd - 1] * out.strides[k][nd - 1];
    if (continues_inner) {
      out.sizes[nd - 1] *= sizes[d];
      continue;
    }
    DP_CHECK(nd < kMaxDims, op, ": the CUDA kernel handles up to ", kMaxDims,
             " dims that cannot be merged, got shape ", shape_str(sizes));
    out.sizes[nd] = sizes[d];
    for (int k = 0; k < N; ++k) out.strides[k][nd] = (*strides[k])[d];
    ++nd;
  }
  out.ndim = nd;
  return out;
}

}  // namespace dp::cuda
