// CUDA backend lifetime (stream, pool, cuBLAS handles, workspace), device count, and the kernels
// that later issues add (each throws naming the op until then).
#include "runtime/backend/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/gemm_algo_cache.h"

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

std::unique_ptr<Backend> make_backend(int device_index) { return std::make_unique<CudaBackend>(device_index); }

CudaBackend::CudaBackend(int device_index, const CudaOptions& options)
    : device_(device_index), options_(options), gemm_algos_(std::make_unique<GemmAlgoCache>()) {
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
  } catch (...) {
    release();  // the destructor does not run after a throwing constructor
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() noexcept {
  // Work still queued may use the workspace and pooled memory: wait for it first.
  if (stream_) DP_CUDA_REPORT(device_, cudaStreamSynchronize(stream_));
  if (blas_lt_) cublasLtDestroy(blas_lt_);
  if (blas_) cublasDestroy(blas_);
  if (workspace_) DP_CUDA_REPORT(device_, cudaFree(workspace_));
  if (stream_) DP_CUDA_REPORT(device_, cudaStreamDestroy(stream_));
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

// ---- Kernels of later issues ------------------------------------------------------------------

void CudaBackend::unary(UnaryOp, const Tensor&, const Tensor&) { unsupported("unary"); }
void CudaBackend::unary_backward(UnaryOp, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  unsupported("unary_backward");
}
void CudaBackend::binary(BinaryOp, const Tensor&, const Tensor&, const Tensor&) { unsupported("binary"); }
void CudaBackend::binary_scalar(BinaryOp, const Tensor&, double, const Tensor&) { unsupported("binary_scalar"); }
void CudaBackend::axpby(double, const Tensor&, double, const Tensor&) { unsupported("axpby"); }
void CudaBackend::reduce(ReduceOp, const Tensor&, const Tensor&) { unsupported("reduce"); }
void CudaBackend::argmax_rows(const Tensor&, const Tensor&) { unsupported("argmax_rows"); }
void CudaBackend::conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  unsupported("conv2d_forward");
}
void CudaBackend::conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  unsupported("conv2d_backward_input");
}
void CudaBackend::conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                         const Conv2dParams&) {
  unsupported("conv2d_backward_weight");
}
void CudaBackend::max_pool2d_forward(const Tensor&, const Tensor&, const Tensor&, const Pool2dParams&) {
  unsupported("max_pool2d_forward");
}
void CudaBackend::max_pool2d_backward(const Tensor&, const Tensor&, const Tensor&) {
  unsupported("max_pool2d_backward");
}
void CudaBackend::avg_pool2d_forward(const Tensor&, const Tensor&, const Pool2dParams&) {
  unsupported("avg_pool2d_forward");
}
void CudaBackend::avg_pool2d_backward(const Tensor&, const Tensor&, const Pool2dParams&) {
  unsupported("avg_pool2d_backward");
}
void CudaBackend::adaptive_avg_pool2d_forward(const Tensor&, const Tensor&) {
  unsupported("adaptive_avg_pool2d_forward");
}
void CudaBackend::adaptive_avg_pool2d_backward(const Tensor&, const Tensor&) {
  unsupported("adaptive_avg_pool2d_backward");
}
void CudaBackend::batch_norm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, const Tensor&, bool, double, double) {
  unsupported("batch_norm_forward");
}
void CudaBackend::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const Tensor&, bool) {
  unsupported("batch_norm_backward");
}
void CudaBackend::layer_norm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, double) {
  unsupported("layer_norm_forward");
}
void CudaBackend::layer_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const Tensor&) {
  unsupported("layer_norm_backward");
}
void CudaBackend::softmax_forward(const Tensor&, const Tensor&, bool) { unsupported("softmax_forward"); }
void CudaBackend::softmax_backward(const Tensor&, const Tensor&, const Tensor&, bool) {
  unsupported("softmax_backward");
}
void CudaBackend::cross_entropy_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                        double) {
  unsupported("cross_entropy_forward");
}
void CudaBackend::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                                         double) {
  unsupported("cross_entropy_backward");
}
void CudaBackend::embedding_forward(const Tensor&, const Tensor&, const Tensor&) {
  unsupported("embedding_forward");
}
void CudaBackend::embedding_backward(const Tensor&, const Tensor&, const Tensor&, int64_t) {
  unsupported("embedding_backward");
}
void CudaBackend::sgd_update(const Tensor&, const Tensor&, const Tensor&, const SgdParams&) {
  unsupported("sgd_update");
}
void CudaBackend::adamw_update(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamParams&) {
  unsupported("adamw_update");
}
void CudaBackend::lamb_direction(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const AdamParams&) {
  unsupported("lamb_direction");
}
void CudaBackend::lars_update(const Tensor&, const Tensor&, const Tensor&, const LarsParams&) {
  unsupported("lars_update");
}
void CudaBackend::squared_norms(const std::vector<Tensor>&, const Tensor&) { unsupported("squared_norms"); }

}  // namespace dp::cuda
