// Launchers for the CUDA kernels in embedding.cu: the embedding gather (forward) and its
// deterministic scatter-add (backward) (conventions in kernel_types.h). An index outside [0, V)
// is recorded in `errors` (NOTE [ Device errors ]) and thrown by the backend at its next sync.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// weight [V, D] contiguous; indices int64 [K] contiguous; out [K, D] contiguous; elements of
// `element_size` bytes (the gather only moves bytes). out[k] = weight[indices[k]]; a zero row for
// an index outside [0, V), which is recorded.
cudaError_t launch_embedding_forward(const void* weight, const int64_t* indices, void* out, int64_t K, int64_t V,
                                     int64_t D, size_t element_size, DeviceErrors* errors, cudaStream_t stream);

// Bytes of device scratch launch_embedding_backward needs for K indices into a [V, D] table:
// the sort keys and positions (twice each), CUB's radix-sort storage, and the per-tile partial
// sums of long runs (acc_t of `dtype`). 0 when there is nothing to sort (K, V or D is 0). May
// query the current device (CUB).
cudaError_t embedding_backward_scratch_bytes(int64_t K, int64_t V, int64_t D, DType dtype, size_t* bytes);

// dout [K, D] contiguous; indices int64 [K]; dweight [V, D] contiguous (zeroed by the caller);
// one floating dtype. dweight[v] += Σ dout[k] over the k with indices[k] == v, summed in acc_t
// (float; double for float64) in a fixed order (increasing k within tiles of 64 sorted rows,
// then the tiles' sums in order) and added once: deterministic, no atomics. Rows
// equal to padding_idx are skipped (a negative padding_idx means none); an index outside
// [0, V) is recorded and skipped. `scratch` holds embedding_backward_scratch_bytes(K, V, D,
// dtype) bytes (16-byte aligned), used on `stream`.
cudaError_t launch_embedding_backward(const void* dout, const int64_t* indices, void* dweight, DType dtype,
                                      int64_t K, int64_t V, int64_t D, int64_t padding_idx, void* scratch,
                                      size_t scratch_bytes, DeviceErrors* errors, cudaStream_t stream);

}  // namespace dp::cuda
