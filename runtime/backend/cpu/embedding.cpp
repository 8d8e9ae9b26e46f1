// PENDING: kernels of this family are being written (see backend.h for the contract).
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {

void CpuBackend::embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out) { unsupported("embedding_forward"); }
void CpuBackend::embedding_backward(const Tensor& dout, const Tensor& indices, const Tensor& dweight, int64_t padding_idx) { unsupported("embedding_backward"); }

}  // namespace dp
