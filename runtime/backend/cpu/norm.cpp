// PENDING: kernels of this family are being written (see backend.h for the contract).
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {

void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean, const Tensor& running_var, const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd, bool training, double momentum, double eps) { unsupported("batch_norm_forward"); }
void CpuBackend::batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, bool training) { unsupported("batch_norm_backward"); }
void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y, const Tensor& save_mean, const Tensor& save_rstd, double eps) { unsupported("layer_norm_forward"); }
void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& save_mean, const Tensor& save_rstd, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) { unsupported("layer_norm_backward"); }

}  // namespace dp
