// PENDING: kernels of this family are being written (see backend.h for the contract).
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {

void CpuBackend::softmax_forward(const Tensor& x, const Tensor& y, bool log) { unsupported("softmax_forward"); }
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) { unsupported("softmax_backward"); }
void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& log_probs, const Tensor& losses, int64_t ignore_index, double label_smoothing) { unsupported("cross_entropy_forward"); }
void CpuBackend::cross_entropy_backward(const Tensor& log_probs, const Tensor& target, const Tensor& dlosses, const Tensor& dlogits, int64_t ignore_index, double label_smoothing) { unsupported("cross_entropy_backward"); }

}  // namespace dp
