// Front-ends of the embedding gather and its deterministic scatter-add (embedding.cu). An index
// outside [0, V) is found by the kernel and thrown at the next sync (NOTE [ Device errors ],
// kernel_types.h).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/embedding_kernels.h"

namespace dp::cuda {

namespace {

void check_indices(const char* op, const Tensor& indices) {
  DP_CHECK(indices.dtype() == kInt64 && indices.is_contiguous(), op,
           ": indices must be a contiguous int64 tensor, got ", indices.str());
}

}  // namespace

// weight [V, D]; indices int64 [K]; out [K, D]; all contiguous.
void CudaBackend::embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  constexpr const char* op = "embedding_forward";
  check_operand(op, weight);
  check_operand(op, indices);
  check_operand(op, out);
  check_supported(Kernel::EmbeddingForward, weight.dtype());
  check_indices(op, indices);
  DP_CHECK(weight.dim() == 2 && weight.is_contiguous(), op, ": weight must be a contiguous [V, D] tensor, got ",
           weight.str());
  const int64_t V = weight.size(0), D = weight.size(1), K = indices.numel();
  DP_CHECK(out.is_contiguous() && out.dtype() == weight.dtype() && out.numel() == K * D &&
               (out.dim() == 0 || out.size(out.dim() - 1) == D),
           op, ": out must be a contiguous ", dtype_name(weight.dtype()), " [", K, ", ", D, "] tensor, got ",
           out.str());
  if (K == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_embedding_forward(weight.raw_data(), indices.data<int64_t>(), out.raw_data(), K, V, D,
                                         weight.element_size(), device_errors(), stream_),
                op, " ", weight.str(), ", ", indices.str());
}

// dout [K, D]; indices int64 [K]; dweight [V, D] (zeroed by the caller); all contiguous.
void CudaBackend::embedding_backward(const Tensor& dout, const Tensor& indices, const Tensor& dweight,
                                     int64_t padding_idx) {
  constexpr const char* op = "embedding_backward";
  check_operand(op, dout);
  check_operand(op, indices);
  check_operand(op, dweight);
  check_supported(Kernel::EmbeddingBackward, dweight.dtype());
  check_indices(op, indices);
  DP_CHECK(dweight.dim() == 2 && dweight.is_contiguous(), op,
           ": dweight must be a contiguous [V, D] tensor, got ", dweight.str());
  const int64_t V = dweight.size(0), D = dweight.size(1), K = indices.numel();
  DP_CHECK(dout.is_contiguous() && dout.dtype() == dweight.dtype() && dout.numel() == K * D &&
               (dout.dim() == 0 || dout.size(dout.dim() - 1) == D),
           op, ": dout must be a contiguous ", dtype_name(dweight.dtype()), " [", K, ", ", D, "] tensor, got ",
           dout.str());
  if (K == 0) return;
  activate();
  size_t scratch_bytes = 0;
  DP_CUDA_CHECK(device_, embedding_backward_scratch_bytes(K, V, D, dweight.dtype(), &scratch_bytes), op,
                " scratch size for ", K, " indices into ", dweight.str());
  // Stream-ordered: freed when this returns, after the kernels that use it are queued.
  Tensor scratch;
  if (scratch_bytes > 0) scratch = Tensor::empty({static_cast<int64_t>(scratch_bytes)}, kUInt8, device());
  DP_CUDA_CHECK(device_,
                launch_embedding_backward(dout.raw_data(), indices.data<int64_t>(), dweight.raw_data(),
                                          dweight.dtype(), K, V, D, padding_idx,
                                          scratch.defined() ? scratch.raw_data() : nullptr, scratch_bytes,
                                          device_errors(), stream_),
                op, " ", dout.str(), " into ", dweight.str());
}

}  // namespace dp::cuda
