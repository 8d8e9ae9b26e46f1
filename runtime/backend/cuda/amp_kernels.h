// Launchers for the CUDA kernels in amp.cu: dynamic loss scaling decided on the device (backend.h,
// amp_unscale_and_check / amp_update_scale; optim/grad_scaler.h). Conventions in kernel_types.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/core/dtype.h"

namespace dp::cuda {

// One gradient of an amp_unscale_and_check call: contiguous, float32/float64/float16/bfloat16.
struct UnscaleInput {
  void* data = nullptr;
  int64_t numel = 0;
  DType dtype = DType::Float32;
};

// Elements one block unscales and checks (a multiple of every vector width).
inline constexpr int64_t kUnscaleSliceElems = 16384;
// Tensors one launch covers (their pointers travel as kernel parameters).
inline constexpr int kUnscaleChunkTensors = 96;

// Every inputs[k] multiplied in place by 1 / *scale (float32 on the device; the reciprocal in
// double rounded to float32, the product in float32, float64 for float64 data) and *found_inf (float32 on the device) set to 1 when any
// value was inf or NaN; never cleared. One launch per dtype present and per kUnscaleChunkTensors
// tensors of it. An unsupported dtype or a negative count: cudaErrorInvalidValue, nothing queued.
cudaError_t launch_amp_unscale_and_check(const UnscaleInput* inputs, int64_t count, float* found_inf,
                                         const float* scale, cudaStream_t stream);

// PyTorch's _amp_update_scale_ on one thread (backend.h, amp_update_scale). growth_interval in
// [1, INT32_MAX], else cudaErrorInvalidValue.
cudaError_t launch_amp_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval,
                                    cudaStream_t stream);

}  // namespace dp::cuda
