// Launchers for the CUDA kernels in reduce.cu: sum/mean/max/min over any set of dims, and row
// argmax (conventions in kernel_types.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// Mirrors dp::ReduceOp (backend.h is C++20 and stays out of the .cu).
enum class ReduceKind : uint8_t { Sum, Mean, Max, Min };

// A reduction as the kernels see it: x's elements are indexed by (kept index o, reduced index r)
// with x offset kept(o) + reduced(r); out is contiguous [kept_numel] in o.
struct ReduceProblem {
  // x's strides over the kept dims, innermost first: out is row-major over these dims (in x's
  // dim order), so OffsetCalculator decoding o gives x's offset.
  StridedShape<1> kept;
  // x's strides over the reduced dims, innermost first, in any order the front-end likes (it
  // puts the smallest stride innermost).
  StridedShape<1> reduced;
  int64_t kept_numel = 0;     // out's numel (> 0)
  int64_t reduced_numel = 0;  // elements folded into each output; 0 gives the identity
  ReduceKind op = ReduceKind::Sum;
  // out = acc * scale: out numel / max(x numel, 1) for Mean (the CPU's formula), else 1.
  double scale = 1.0;
};

// Bytes of scratch memory launch_reduce needs for `problem` (0 when it needs none): partial
// results of a reduction split across blocks. Depends on the problem only, not the device.
size_t reduce_scratch_bytes(const ReduceProblem& problem, DType dtype);
// out = reduce(x); `scratch` holds reduce_scratch_bytes(problem, dtype) bytes (may be null when
// that is 0). Deterministic: no atomics; the split depends on the problem only.
cudaError_t launch_reduce(const void* x, void* out, void* scratch, const ReduceProblem& problem, DType dtype,
                          cudaStream_t stream);

// out[m] = the first n maximising x[m, n] over contiguous x [rows, cols], with the CPU's NaN
// rule (a scan keeping `best` while !(x[n] > x[best])): NaN at n = 0 gives 0, any other NaN is
// skipped. cols == 0 gives 0.
cudaError_t launch_argmax_rows(const void* x, DType dtype, int64_t rows, int64_t cols, int64_t* out,
                               cudaStream_t stream);

}  // namespace dp::cuda
