// Front-ends of the softmax, log-softmax, attention softmax and cross-entropy kernels
// (softmax_loss.cu): operand checks, then one kernel launch each. A cross-entropy target outside
// [0, C) is found by the kernel and thrown at the next sync (NOTE [ Device errors ],
// kernel_types.h).
#include <cuda_runtime_api.h>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/softmax_loss_kernels.h"

namespace dp::cuda {

namespace {

// t is a contiguous [M, N] tensor of `dtype` with the shape of `like`.
void check_rows(const char* op, const Tensor& t, const Tensor& like) {
  DP_CHECK(t.dim() == 2 && t.is_contiguous(), op, ": expected a contiguous [M, N] tensor, got ", t.str());
  DP_CHECK(t.shape() == like.shape() && t.dtype() == like.dtype(), op, ": ", t.str(), " does not match ",
           like.str());
}

// target: contiguous int64 [M].
void check_target(const char* op, const Tensor& target, int64_t M) {
  DP_CHECK(target.dtype() == kInt64 && target.is_contiguous() && target.numel() == M, op,
           ": target must be a contiguous int64 tensor of ", M, " class indices, got ", target.str());
}

// A per-sample vector: contiguous [M] of `dtype`.
void check_per_sample(const char* op, const char* what, const Tensor& t, int64_t M, DType dtype) {
  DP_CHECK(t.is_contiguous() && t.numel() == M && t.dtype() == dtype, op, ": ", what, " must be a contiguous ",
           dtype_name(dtype), " tensor of ", M, " elements, got ", t.str());
}

}  // namespace

void CudaBackend::softmax_forward(const Tensor& x, const Tensor& y, bool log) {
  const char* op = log ? "log_softmax_forward" : "softmax_forward";
  check_operand(op, x);
  check_operand(op, y);
  check_supported(Kernel::SoftmaxForward, x.dtype());
  check_rows(op, x, x);
  check_rows(op, y, x);
  const int64_t M = x.size(0), N = x.size(1);
  if (M == 0 || N == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_softmax_forward(x.raw_data(), AttentionMask{}, y.raw_data(), x.dtype(), M, N, log, 1.0, stream_),
                op, " ", x.str());
}

void CudaBackend::attention_softmax_forward(const Tensor& x, const Tensor& mask, const Tensor& y, double scale) {
  constexpr const char* op = "attention_softmax_forward";
  check_operand(op, x);
  check_operand(op, y);
  check_supported(Kernel::AttentionSoftmaxForward, x.dtype());
  DP_CHECK(x.dim() == 3 && x.is_contiguous(), op, ": expected contiguous scores [B, R, N], got ", x.str());
  DP_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype() && y.is_contiguous(), op, ": ", y.str(),
           " does not match ", x.str());
  const int64_t B = x.size(0), R = x.size(1), N = x.size(2);
  AttentionMask m;
  if (mask.defined()) {
    check_operand(op, mask);
    DP_CHECK(mask.dtype() == kFloat32 && mask.is_contiguous() && mask.dim() == 3 &&
                 (mask.size(0) == 1 || mask.size(0) == B) && mask.size(1) >= 1 && R % mask.size(1) == 0 &&
                 mask.size(2) == N,
             op, ": the mask must be a contiguous float32 [1 or ", B, ", Q, ", N, "] with Q dividing ", R, ", got ",
             mask.str());
    m.data = mask.data<float>();
    m.rows = mask.size(1);
    m.rows_per_batch = R;
    m.per_batch = mask.size(0) > 1;
  }
  if (B * R == 0 || N == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_softmax_forward(x.raw_data(), m, y.raw_data(), x.dtype(), B * R, N, /*log=*/false, scale,
                                       stream_),
                op, " ", x.str());
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  rows_backward(log ? "log_softmax_backward" : "softmax_backward", Kernel::SoftmaxBackward, y, dy, dx, log, 1.0);
}

void CudaBackend::attention_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) {
  rows_backward("attention_softmax_backward", Kernel::AttentionSoftmaxBackward, y, dy, dx, false, scale);
}

// Softmax and attention softmax backward: y, dy, dx contiguous [M, N] of one dtype.
void CudaBackend::rows_backward(const char* op, Kernel kernel, const Tensor& y, const Tensor& dy, const Tensor& dx,
                                bool log, double scale) {
  check_operand(op, y);
  check_operand(op, dy);
  check_operand(op, dx);
  check_supported(kernel, y.dtype());
  check_rows(op, y, y);
  check_rows(op, dy, y);
  check_rows(op, dx, y);
  const int64_t M = y.size(0), N = y.size(1);
  if (M == 0 || N == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_softmax_backward(y.raw_data(), dy.raw_data(), dx.raw_data(), y.dtype(), M, N, log, scale,
                                        stream_),
                op, " ", y.str());
}

void CudaBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& log_probs,
                                        const Tensor& losses, int64_t ignore_index, double label_smoothing) {
  constexpr const char* op = "cross_entropy_forward";
  check_operand(op, logits);
  check_operand(op, target);
  check_operand(op, log_probs);
  check_operand(op, losses);
  check_supported(Kernel::CrossEntropyForward, logits.dtype());
  check_rows(op, logits, logits);
  check_rows(op, log_probs, logits);
  const int64_t M = logits.size(0), C = logits.size(1);
  check_target(op, target, M);
  check_per_sample(op, "losses", losses, M, logits.dtype());
  if (M == 0) return;
  DP_CHECK(C >= 1, op, ": expected logits [M, C] with C >= 1, got ", logits.str());
  activate();
  DP_CUDA_CHECK(device_,
                launch_cross_entropy_forward(logits.raw_data(), target.data<int64_t>(), log_probs.raw_data(),
                                             losses.raw_data(), logits.dtype(), M, C, ignore_index, label_smoothing,
                                             device_errors(), stream_),
                op, " ", logits.str());
}

void CudaBackend::cross_entropy_backward(const Tensor& log_probs, const Tensor& target, const Tensor& dlosses,
                                         const Tensor& dlogits, int64_t ignore_index, double label_smoothing) {
  constexpr const char* op = "cross_entropy_backward";
  check_operand(op, log_probs);
  check_operand(op, target);
  check_operand(op, dlosses);
  check_operand(op, dlogits);
  check_supported(Kernel::CrossEntropyBackward, log_probs.dtype());
  check_rows(op, log_probs, log_probs);
  check_rows(op, dlogits, log_probs);
  const int64_t M = log_probs.size(0), C = log_probs.size(1);
  check_target(op, target, M);
  check_per_sample(op, "dlosses", dlosses, M, log_probs.dtype());
  if (M == 0 || C == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_cross_entropy_backward(log_probs.raw_data(), target.data<int64_t>(), dlosses.raw_data(),
                                              dlogits.raw_data(), log_probs.dtype(), M, C, ignore_index,
                                              label_smoothing, device_errors(), stream_),
                op, " ", log_probs.str());
}

}  // namespace dp::cuda
