// PENDING: kernels of this family are being written (see backend.h for the contract).
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {

void CpuBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p) { unsupported("max_pool2d_forward"); }
void CpuBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) { unsupported("max_pool2d_backward"); }
void CpuBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) { unsupported("avg_pool2d_forward"); }
void CpuBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) { unsupported("avg_pool2d_backward"); }
void CpuBackend::adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) { unsupported("adaptive_avg_pool2d_forward"); }
void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) { unsupported("adaptive_avg_pool2d_backward"); }

}  // namespace dp
