#include "runtime/nn/batchnorm.h"

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"

namespace dp::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, Device device, double eps, double momentum, bool affine,
                         DType dtype)
    : num_features(num_features), eps(eps), momentum(momentum) {
  DP_CHECK(num_features > 0 && eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm2d: invalid num_features=",
           num_features, " eps=", eps, " momentum=", momentum);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, dtype, device));
    bias = register_parameter("bias", zeros({num_features}, dtype, device));
  }
  running_mean = register_buffer("running_mean", zeros({num_features}, dtype, device));
  running_var = register_buffer("running_var", ones({num_features}, dtype, device));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64, device));
}

Tensor BatchNorm2d::forward(const Tensor& x) { return normalize(x, /*fused=*/false, Tensor()); }

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  return normalize(x, /*fused=*/true, residual);
}

Tensor BatchNorm2d::normalize(const Tensor& x, bool fused, const Tensor& residual) {
  const auto range = forward_range();
  // x [N, C, H, W]; weight, bias, running_mean, running_var [C] → y [N, C, H, W]
  DP_CHECK(x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d(", num_features, "): expected input [N, ",
           num_features, ", H, W], got ", x.str());
  // The normalisation with the running statistics `rm`, `rv` (undefined: not tracked).
  auto norm = [&](const Tensor& rm, const Tensor& rv, bool training) {
    return fused ? batch_norm_add_relu(x, residual, weight, bias, rm, rv, training, momentum, eps)
                 : batch_norm(x, weight, bias, rm, rv, training, momentum, eps);
  };
  if (is_training() && running_stats_frozen_) {
    DP_CHECK(!synchronizer_, "BatchNorm2d: frozen running statistics with a synchroniser are not supported (the "
             "synchronised statistics always update them)");
    return norm(Tensor(), Tensor(), /*training=*/true);
  }
  if (is_training()) {
    // Counted by a device kernel, not from a host mirror: nothing is read back, a loaded or
    // broadcast count goes on from where it is, and a CUDA graph's replays keep counting.
    num_batches_tracked.device().backend().count_steps({num_batches_tracked}, Tensor(), StepCounting::Always);
    num_batches_tracked.bump_version();
  }
  if (is_training() && synchronizer_) {
    Tensor y = synchronizer_->batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps);
    if (!fused) return y;
    return relu(residual.defined() ? add(y, residual) : y);
  }
  return norm(running_mean, running_var, is_training());
}

}  // namespace dp::nn
