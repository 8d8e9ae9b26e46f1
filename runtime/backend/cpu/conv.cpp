// PENDING: kernels of this family are being written (see backend.h for the contract).
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {

void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) { unsupported("conv2d_forward"); }
void CpuBackend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p) { unsupported("conv2d_backward_input"); }
void CpuBackend::conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias, const Conv2dParams& p) { unsupported("conv2d_backward_weight"); }

}  // namespace dp
