// Helpers shared by the GPU probes (cudnn_fusion_probe, batch_norm_probe): errors that carry
// their call and context, float16/bfloat16 bits on the host, and timing with CUDA events.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace probe {

// A cuDNN call that failed, with its status (a probe reports a refusal as a result, not a crash).
struct ProbeError : std::runtime_error {
  cudnnStatus_t status;
  ProbeError(const std::string& what, cudnnStatus_t s) : std::runtime_error(what), status(s) {}
};

inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}

// cuDNN's own explanation (cudnnGetLastErrorString) is appended when it has one.
inline void check_cudnn(cudnnStatus_t s, const char* call, const std::string& context) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  char last[512] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  std::string what = context + ": " + call + " -> " + cudnnGetErrorString(s);
  if (last[0]) what += std::string(" (") + last + ")";
  throw ProbeError(what, s);
}

// float <-> the low dtype's bits, rounding to nearest even (cuda_fp16.h / cuda_bf16.h on the host).
inline uint16_t to_low(float f, cudnnDataType_t dtype) {
  if (dtype == CUDNN_DATA_HALF) return static_cast<__half_raw>(__float2half_rn(f)).x;
  return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x;
}
inline float from_low(uint16_t bits, cudnnDataType_t dtype) {
  if (dtype == CUDNN_DATA_HALF) {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = bits;
  return __bfloat162float(__nv_bfloat16(r));
}

// n elements of type T from device memory at p, after everything queued on any stream (the
// probes compute on a non-blocking stream, which cudaMemcpy's legacy stream does not wait for).
template <class T>
std::vector<T> download(const void* p, int64_t n) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<T> host(static_cast<size_t>(n));
  check_cuda(cudaMemcpy(host.data(), p, host.size() * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

// n elements of type T from host memory to device memory at p, finished before it returns (a
// pageable cudaMemcpy may return while its DMA still runs, and the probes' non-blocking stream
// would not wait for it).
template <class T>
void upload(void* p, const T* host, int64_t n) {
  check_cuda(cudaMemcpy(p, host, static_cast<size_t>(n) * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// The larger error of the two, where a NaN is the largest (std::max would pass it over).
inline double worse(double so_far, double error) { return std::isnan(error) ? INFINITY : std::max(so_far, error); }

// ---- Command lines ----

// The value after option argv[i] (i moves past it); a missing one ends the program (exit 2).
inline std::string option_value(int argc, char** argv, int& i, const char* program) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s: %s needs a value\n", program, argv[i]);
    std::exit(2);
  }
  return argv[++i];
}

// "fp16,bf16" -> {"fp16", "bf16"}; any other name ends the program (exit 2).
inline std::vector<std::string> parse_dtypes(const std::string& list, const char* program) {
  std::vector<std::string> dtypes;
  for (size_t p = 0; p <= list.size();) {
    const size_t q = std::min(list.find(',', p), list.size());
    dtypes.push_back(list.substr(p, q - p));
    if (dtypes.back() != "fp16" && dtypes.back() != "bf16") {
      std::fprintf(stderr, "%s: --dtypes takes fp16 and bf16, got '%s'\n", program, dtypes.back().c_str());
      std::exit(2);
    }
    p = q + 1;
  }
  return dtypes;
}

// ---- Timing ----

// The median of `iters` runs of run() on `stream`, each bracketed by CUDA events, after `warmup`
// untimed runs (ms).
template <class Run>
double median_ms(cudaStream_t stream, int warmup, int iters, Run&& run) {
  for (int i = 0; i < warmup; ++i) run();
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "cudaEventCreate");
  check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  try {
    for (int i = 0; i < iters; ++i) {
      check_cuda(cudaEventRecord(start, stream), "cudaEventRecord");
      run();
      check_cuda(cudaEventRecord(stop, stream), "cudaEventRecord");
      check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      times.push_back(ms);
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (times.empty()) return 0.0;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace probe

#define CHECK_CUDA(call) ::probe::check_cuda((call), #call)
#define CHECK_CUDNN(call, context) ::probe::check_cudnn((call), #call, (context))
