// Checked CUDA / cuBLAS / cuDNN calls. Every call into the CUDA runtime or cuBLAS(Lt) from the backend's
// host code goes through one of these, so a failure says which call, on which device, and why:
//   cudaMallocAsync(&ptr, nbytes, stream_) failed on cuda:0: out of memory
//   (cudaErrorMemoryAllocation; requested 1.5 GiB)
// Host code only (.cpp); the .cu launchers return cudaError_t and their callers check it.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <cstddef>
#include <string>

#include "runtime/core/error.h"

namespace dp::cuda {

// device < 0: the call is not tied to one device (device count, pinned host memory).
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, int device,
                                   const std::string& context);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, int device,
                                     const std::string& context);
[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t status, int device,
                                    const std::string& context);
// For destructors, which must not throw: prints the same message to stderr. Errors caused by the
// CUDA runtime already being unloaded at process exit are ignored.
void report_cuda_error(const char* call, cudaError_t status, int device);

// "512 B", "3.0 MiB", "1.5 GiB".
std::string format_bytes(size_t nbytes);

}  // namespace dp::cuda

// DP_CUDA_CHECK(device_, cudaMallocAsync(&p, n, stream_), "requested ", format_bytes(n));
// The context parts are streamed only on failure.
#define DP_CUDA_CHECK(device, call, ...)                                                          \
  do {                                                                                            \
    const cudaError_t dp_cuda_status_ = (call);                                                   \
    if (dp_cuda_status_ != cudaSuccess) [[unlikely]] {                                            \
      ::dp::cuda::throw_cuda_error(#call, dp_cuda_status_, (device),                      \
                                           ::dp::detail::concat("" __VA_OPT__(, ) __VA_ARGS__));  \
    }                                                                                             \
  } while (0)

#define DP_CUBLAS_CHECK(device, call, ...)                                                        \
  do {                                                                                            \
    const cublasStatus_t dp_cublas_status_ = (call);                                              \
    if (dp_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                \
      ::dp::cuda::throw_cublas_error(#call, dp_cublas_status_, (device),                  \
                                             ::dp::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                                             \
  } while (0)

#define DP_CUDNN_CHECK(device, call, ...)                                                         \
  do {                                                                                            \
    const cudnnStatus_t dp_cudnn_status_ = (call);                                                \
    if (dp_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                                  \
      ::dp::cuda::throw_cudnn_error(#call, dp_cudnn_status_, (device),                            \
                                    ::dp::detail::concat("" __VA_OPT__(, ) __VA_ARGS__));         \
    }                                                                                             \
  } while (0)

// Non-throwing, for destructors.
#define DP_CUDA_REPORT(device, call)                                                 \
  do {                                                                               \
    const cudaError_t dp_cuda_status_ = (call);                                      \
    if (dp_cuda_status_ != cudaSuccess) {                                            \
      ::dp::cuda::report_cuda_error(#call, dp_cuda_status_, (device));       \
    }                                                                                \
  } while (0)
