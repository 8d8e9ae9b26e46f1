// CUDA kernels of the loss-scaling family: one multi-tensor pass that unscales the gradients and
// notes a non-finite value, and the one-thread scale update. Nothing here reads back to the host:
// the verdict (found_inf) and the scale stay on the device for the optimiser kernels and the next
// step (optim/grad_scaler.h). Launchers are declared in amp_kernels.h.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "runtime/backend/cuda/amp_kernels.h"
#include "runtime/backend/cuda/device_utils.cuh"

namespace dp::cuda {

namespace {

using device::acc_t;
using device::convert;
using device::kThreads;
using device::kVec;
using device::Vec;

constexpr int kChunk = kUnscaleChunkTensors;
static_assert(kUnscaleSliceElems % 8 == 0, "slices are whole 16-byte vectors of every dtype");

// Up to kChunk tensors of one dtype, passed by value (about 2.4 KB, under the 4 KB parameter
// limit). Tensor k is unscaled by the blocks [block_begin[k], block_begin[k + 1]), each taking
// kUnscaleSliceElems elements (the last one fewer).
struct UnscaleChunk {
  void* data[kChunk];
  int64_t numel[kChunk];
  int64_t block_begin[kChunk + 1];
  uint8_t aligned[kChunk];  // 16-byte aligned: the vector path is taken
  int32_t count;
};
static_assert(sizeof(UnscaleChunk) <= 4000, "kernel parameters must stay under 4 KB");

template <typename T>
__device__ __forceinline__ bool unscale_one(T& x, acc_t<T> inv) {
  const acc_t<T> v = convert<acc_t<T>>(x);
  x = convert<T>(v * inv);
  return !isfinite(v);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    unscale_and_check_kernel(UnscaleChunk c, float* found_inf, const float* scale) {
  const int64_t block = blockIdx.x;
  int k = 0;
  while (block >= c.block_begin[k + 1]) ++k;  // at most kChunk steps, the same in every thread
  const int64_t begin = (block - c.block_begin[k]) * kUnscaleSliceElems;
  const int64_t end = min(begin + kUnscaleSliceElems, c.numel[k]);
  T* p = static_cast<T*>(c.data[k]);
  // GradScaler's inv_scale: the reciprocal in double, rounded to float32.
  const acc_t<T> inv = static_cast<acc_t<T>>(static_cast<float>(__drcp_rn(static_cast<double>(*scale))));
  bool bad = false;
  int64_t scalar_begin = begin;
  if (c.aligned[k]) {
    constexpr int V = kVec<T>;
    using VecT = Vec<T, V>;
    VecT* pv = reinterpret_cast<VecT*>(p + begin);
    const int64_t n_vec = (end - begin) / V;
    for (int64_t j = threadIdx.x; j < n_vec; j += blockDim.x) {
      VecT x = pv[j];
#pragma unroll
      for (int e = 0; e < V; ++e) bad |= unscale_one(x.v[e], inv);
      pv[j] = x;
    }
    scalar_begin = begin + n_vec * V;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) bad |= unscale_one(p[i], inv);
  // Any thread that saw one writes the same value: a benign race, no atomics needed.
  if (bad) *found_inf = 1.0f;
}

template <typename T>
cudaError_t launch_unscale_typed(const UnscaleInput* inputs, int64_t count, float* found_inf, const float* scale,
                                 DType dtype, cudaStream_t stream) {
  UnscaleChunk c{};
  auto flush = [&]() -> cudaError_t {
    if (c.count == 0) return cudaSuccess;
    const int64_t blocks = c.block_begin[c.count];
    if (blocks > INT32_MAX) return cudaErrorInvalidValue;
    if (blocks > 0) {
      for (int k = c.count + 1; k <= kChunk; ++k) c.block_begin[k] = blocks;
      unscale_and_check_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(c, found_inf, scale);
      const cudaError_t status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
    c = UnscaleChunk{};
    return cudaSuccess;
  };
  for (int64_t k = 0; k < count; ++k) {
    const UnscaleInput& x = inputs[k];
    if (x.dtype != dtype || x.numel == 0) continue;
    const int i = c.count++;
    c.data[i] = x.data;
    c.numel[i] = x.numel;
    c.aligned[i] = device::aligned16(x.data) ? 1 : 0;
    c.block_begin[i + 1] = c.block_begin[i] + (x.numel + kUnscaleSliceElems - 1) / kUnscaleSliceElems;
    if (c.count == kChunk) {
      const cudaError_t status = flush();
      if (status != cudaSuccess) return status;
    }
  }
  return flush();
}

__global__ void update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int32_t growth_interval) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(__dmul_rn(static_cast<double>(*scale), backoff_factor));
    *growth_tracker = 0;
    return;
  }
  const int64_t successful = static_cast<int64_t>(*growth_tracker) + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(__dmul_rn(static_cast<double>(*scale), growth_factor));
    if (isfinite(grown)) *scale = grown;  // the scale never becomes inf
    *growth_tracker = 0;
  } else {
    *growth_tracker = static_cast<int32_t>(successful);
  }
}

}  // namespace

cudaError_t launch_amp_unscale_and_check(const UnscaleInput* inputs, int64_t count, float* found_inf,
                                         const float* scale, cudaStream_t stream) {
  if (count < 0 || found_inf == nullptr || scale == nullptr) return cudaErrorInvalidValue;
  for (int64_t k = 0; k < count; ++k) {
    const UnscaleInput& x = inputs[k];
    const bool floating = x.dtype == DType::Float32 || x.dtype == DType::Float64 || x.dtype == DType::Float16 ||
                          x.dtype == DType::BFloat16;
    if (!floating || x.numel < 0 || (x.numel > 0 && x.data == nullptr)) return cudaErrorInvalidValue;
  }
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    cudaError_t status = cudaSuccess;
    device::dispatch_floating_dtype(dtype, [&](auto tag) {
      using T = decltype(tag);
      status = launch_unscale_typed<T>(inputs, count, found_inf, scale, dtype, stream);
    });
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t launch_amp_update_scale(float* scale, int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval,
                                    cudaStream_t stream) {
  if (scale == nullptr || growth_tracker == nullptr || found_inf == nullptr || growth_interval < 1 ||
      growth_interval > INT32_MAX)
    return cudaErrorInvalidValue;
  update_scale_kernel<<<1, 1, 0, stream>>>(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                                           static_cast<int32_t>(growth_interval));
  return cudaGetLastError();
}

}  // namespace dp::cuda
