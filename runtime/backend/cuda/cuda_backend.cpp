// CUDA backend lifetime (stream, pool, cuBLAS/cuDNN handles, workspace, device-error record),
// device count, and what the kernels take (supports()). The kernels are in one file per family.
#include "runtime/backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>

#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/conv_algo_cache.h"
#include "runtime/backend/cuda/gemm_algo_cache.h"
#include "runtime/backend/cuda/graph_memory.h"
#include "runtime/backend/cuda/kernel_types.h"

namespace dp::cuda {

int device_count() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  // No driver (35), a stub driver (34) or no device (100): a machine without a usable GPU.
  if (status == cudaErrorInsufficientDriver || status == cudaErrorStubLibrary || status == cudaErrorNoDevice) {
    (void)cudaGetLastError();
    return 0;
  }
  if (status != cudaSuccess) throw_cuda_error("cudaGetDeviceCount(&count)", status, -1, "");
  return count;
}

CudaBackend::CudaBackend(int device_index, const CudaOptions& options)
    : device_(device_index),
      options_(options),
      gemm_algos_(std::make_unique<GemmAlgoCache>()),
      conv_algos_(std::make_unique<ConvAlgoCache>()) {
  const int count = device_count();
  DP_CHECK(device_index >= 0 && device_index < count, "CUDA backend: device cuda:", device_index,
           " requested but ", count, " GPU(s) are visible");
  try {
    activate();
    DP_CUDA_CHECK(device_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // NOTE [ CUDA memory pool ]: keep freed blocks instead of returning them at each sync.
    DP_CUDA_CHECK(device_, cudaDeviceGetDefaultMemPool(&pool_, device_));
    uint64_t keep_everything = UINT64_MAX;
    DP_CUDA_CHECK(device_, cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_everything));
    DP_CUBLAS_CHECK(device_, cublasCreate(&blas_));
    DP_CUBLAS_CHECK(device_, cublasSetStream(blas_, stream_));
    DP_CUBLAS_CHECK(device_, cublasLtCreate(&blas_lt_));
    if (options_.gemm_workspace_bytes > 0) {
      DP_CUDA_CHECK(device_, cudaMalloc(&workspace_, options_.gemm_workspace_bytes), "GEMM workspace of ",
                    format_bytes(options_.gemm_workspace_bytes));
    }
    // cuBLAS (the fallback in gemm.cpp) shares the workspace: both run in order on stream_.
    DP_CUBLAS_CHECK(device_, cublasSetWorkspace(blas_, workspace_, options_.gemm_workspace_bytes));
    // NOTE [ Device errors ]: written by kernels through the mapped device address, read by the
    // host after a sync through the host address, with no copy.
    void* errors = nullptr;
    DP_CUDA_CHECK(device_, cudaHostAlloc(&errors, sizeof(DeviceErrors), cudaHostAllocMapped | cudaHostAllocPortable),
                  "device-error record");
    device_errors_host_ = new (errors) DeviceErrors{};
    void* errors_device = nullptr;
    DP_CUDA_CHECK(device_, cudaHostGetDevicePointer(&errors_device, errors, 0));
    device_errors_device_ = static_cast<DeviceErrors*>(errors_device);
  } catch (...) {
    release();  // the destructor does not run after a throwing constructor
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  // Work still queued may use the workspace and pooled memory: wait for it first.
  if (stream_) DP_CUDA_REPORT(device_, cudaStreamSynchronize(stream_));
  if (cudnn_) cudnnDestroy(cudnn_);
  if (blas_lt_) cublasLtDestroy(blas_lt_);
  if (blas_) cublasDestroy(blas_);
  if (workspace_) DP_CUDA_REPORT(device_, cudaFree(workspace_));
  if (graph_memory_) {  // graphs and their tensors are gone by now (they need the backend)
    live_graphs_ = 0;
    release_graph_memory_if_unused();
  }
  if (stream_) DP_CUDA_REPORT(device_, cudaStreamDestroy(stream_));
  if (device_errors_host_) DP_CUDA_REPORT(device_, cudaFreeHost(device_errors_host_));
  cudnn_ = nullptr;
  device_errors_host_ = nullptr;
  device_errors_device_ = nullptr;
  blas_lt_ = nullptr;
  blas_ = nullptr;
  workspace_ = nullptr;
  stream_ = nullptr;
}

void CudaBackend::activate() const {
  int current = -1;
  DP_CUDA_CHECK(device_, cudaGetDevice(&current));
  if (current != device_) DP_CUDA_CHECK(device_, cudaSetDevice(device_));
}

// ---- What the kernels take --------------------------------------------------------------------

bool CudaBackend::supports(Kernel kernel, DType dtype) const {
  const bool floating = is_floating(dtype);
  switch (kernel) {
    case Kernel::Copy: case Kernel::Fill: case Kernel::Arange: return true;
    // The loss scale is float32, as PyTorch's GradScaler keeps it.
    case Kernel::AmpUpdateScale: return dtype == kFloat32;
    // Step bookkeeping: fixed dtypes inside (int64 counters, float64 tables and norms, a float32
    // verdict), serving float32 and float64 steps.
    case Kernel::CountSteps: case Kernel::LrLookup: case Kernel::ClipCoefficient: case Kernel::ScaleBy:
      return dtype == kFloat32 || dtype == kFloat64;
    // Optimiser state and norms stay in float32/float64 (master weights; mixed precision keeps
    // parameters in float32).
    case Kernel::SgdUpdate: case Kernel::AdamwUpdate: case Kernel::LambDirection: case Kernel::LambUpdate:
    case Kernel::LarsUpdate: case Kernel::LarsTrustRatios: case Kernel::SquaredNorms:
      return dtype == kFloat32 || dtype == kFloat64;
    default: return floating;  // every other kernel: float32, float64, float16, bfloat16
  }
}

void CudaBackend::check_supported(Kernel kernel, DType dtype) const {
  if (supports(kernel, dtype)) return;
  std::string taken;
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool})
    if (supports(kernel, t)) taken += std::string(taken.empty() ? "" : ", ") + dtype_name(t);
  throw Error(detail::concat(kernel_name(kernel), ": the CUDA kernel supports ", taken, "; got ", dtype_name(dtype),
                             " (device cuda:", device_, ")"));
}

void CudaBackend::check_operand(const char* op, const Tensor& t) const {
  DP_CHECK(&t.device().backend() == this, op, ": ", t.str(), " is not on cuda:", device_, ", the device running the op");
}

// ---- Device errors (NOTE [ Device errors ]) ---------------------------------------------------

void CudaBackend::raise_device_errors() {
  DeviceErrors* e = device_errors_host_;
  if (e == nullptr) return;
  const auto code = static_cast<DeviceErrorCode>(reinterpret_cast<volatile int32_t&>(e->code));
  if (code == DeviceErrorCode::None) return;
  const DeviceErrors seen = *e;
  *e = DeviceErrors{};  // reported once; the next error can be recorded
  switch (code) {
    case DeviceErrorCode::ClassIndexOutOfRange:
      throw Error(detail::concat("cross_entropy: target ", seen.value, " at row ", seen.where,
                                 " is out of range for ", seen.bound, " classes (valid: 0 to ", seen.bound - 1,
                                 ", or ignore_index); found on cuda:", device_, " by a kernel queued before this sync"));
    case DeviceErrorCode::EmbeddingIndexOutOfRange:
      throw Error(detail::concat("embedding: index ", seen.value, " at position ", seen.where,
                                 " is out of range for a table of ", seen.bound, " rows; found on cuda:", device_,
                                 " by a kernel queued before this sync"));
    case DeviceErrorCode::None: break;
  }
  throw Error(detail::concat("cuda:", device_, ": a kernel recorded an unknown device error (code ",
                             static_cast<int>(code), ", value ", seen.value, ")"));
}

// ---- cuDNN ------------------------------------------------------------------------------------

cudnnContext* CudaBackend::cudnn() {
  std::lock_guard<std::mutex> lock(cudnn_mutex_);
  if (cudnn_ == nullptr) {
    activate();
    cudnnHandle_t handle = nullptr;
    DP_CUDNN_CHECK(device_, cudnnCreate(&handle), "is libcudnn.so.9 (cuDNN 9) on the library path?");
    cudnn_ = handle;
    DP_CUDNN_CHECK(device_, cudnnSetStream(cudnn_, stream_));
  }
  return cudnn_;
}

}  // namespace dp::cuda
