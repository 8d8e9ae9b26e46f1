// Launchers for the pooling kernels in pool.cu (conventions in kernel_types.h). Every tensor of a
// call is NCHW-contiguous, or every one channels-last; either way the problem is `planes` = N*C
// independent [H, W] input planes and [OH, OW] output planes; max-pool indices are int32 offsets
// h * W + w into the plane.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// Sizes of one pooling problem; the window fields are unused by the adaptive kernels.
struct PoolGeometry {
  int64_t planes = 0;   // N * C
  int64_t channels = 1;  // C
  bool channels_last = false;  // NHWC in memory (NOTE [ Channels-last ])
  int64_t H = 0, W = 0;    // input plane
  int64_t OH = 0, OW = 0;  // output plane
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg pool only
};

// y = max over each window, indices = where (first maximum in scan order; a NaN wins, the last
// NaN of the window when there are several), as the CPU backend.
cudaError_t launch_max_pool2d_forward(const void* x, void* y, int32_t* indices, DType dtype,
                                      const PoolGeometry& g, cudaStream_t stream);
// dx[plane][e] = Σ dy[o] over the outputs o whose window holds e and whose index is e, in output
// order (what the CPU's scatter gives for indices from the forward); the window fields are used.
cudaError_t launch_max_pool2d_backward(const void* dy, const int32_t* indices, void* dx, DType dtype,
                                       const PoolGeometry& g, cudaStream_t stream);
cudaError_t launch_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                      cudaStream_t stream);
cudaError_t launch_avg_pool2d_backward(const void* dy, void* dx, DType dtype, const PoolGeometry& g,
                                       cudaStream_t stream);
cudaError_t launch_adaptive_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                               cudaStream_t stream);
cudaError_t launch_adaptive_avg_pool2d_backward(const void* dy, void* dx, DType dtype,
                                                const PoolGeometry& g, cudaStream_t stream);

}  // namespace dp::cuda
