#include "optim/lamb.h"

#include <cmath>
#include <limits>

#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"

namespace dp {

LAMB::LAMB(std::vector<Tensor> params, const LambOptions& options)
    : LAMB(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr, options.weight_decay}}, options) {}

LAMB::LAMB(std::vector<ParamGroup> groups, const LambOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  check_adam_options("LAMB", options.beta1, options.beta2, options.eps);
  DP_CHECK(options.max_grad_norm >= 0, "LAMB: max_grad_norm must be >= 0 (0: no clipping), got ",
           options.max_grad_norm);
}

void LAMB::update(const DeviceStep& device) {
  NoGradGuard no_grad;
  struct Item {
    size_t g, i;
    Tensor param, grad, update;
    bool adapt;
  };
  std::vector<Item> items;
  std::vector<Tensor> grads, counters;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    const bool adapt = groups_[g].adapt && groups_[g].weight_decay != 0;
    items.push_back({g, i, param, grad, Tensor(), adapt});
    grads.push_back(grad);
  });
  if (items.empty()) return;

  // Stage 0: the global gradient norm across all groups.
  last_grad_norm_ = global_norm(grads);
  const double divisor =
      options_.max_grad_norm > 0 && last_grad_norm_ > options_.max_grad_norm ? last_grad_norm_ / options_.max_grad_norm
                                                                             : 1.0;
  // Stage 1: moments and the update direction u.
  std::vector<Tensor> to_norm;
  for (Item& it : items) {
    AdamParams p;
    p.lr = groups_[it.g].lr;
    p.weight_decay = groups_[it.g].weight_decay;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.grad_divisor = divisor;
    p.control = control_for(device, it.g, it.i);  // host-gated: only the step count is a device value
    counters.push_back(p.control.step_count);
    const Tensor& m = zeroed_buffer(it.g, it.i, "exp_avg");
    const Tensor& v = zeroed_buffer(it.g, it.i, "exp_avg_sq");
    it.update = Tensor::empty(it.param.shape(), it.param.dtype(), it.param.device());
    it.param.device().backend().lamb_direction(it.param, it.grad, m, v, it.update, p);
    if (it.adapt) {
      to_norm.push_back(it.param);
      to_norm.push_back(it.update);
    }
  }
  // Stage 2: ‖w‖ and ‖u‖ in one pass, then w ← w − lr·r·u.
  const std::vector<double> sq = squared_norms(to_norm);
  last_trust_ = per_parameter(std::numeric_limits<double>::quiet_NaN());
  size_t k = 0;
  for (const Item& it : items) {
    double ratio = 1.0;
    if (it.adapt) {
      const double w_norm = std::sqrt(sq[k]), u_norm = std::sqrt(sq[k + 1]);
      k += 2;
      if (w_norm != 0 && u_norm != 0) ratio = w_norm / u_norm;
    }
    last_trust_[it.g][it.i] = ratio;
    it.param.device().backend().axpby(-groups_[it.g].lr * ratio, it.update, 1.0, it.param);
    it.param.bump_version();
  }
  count_applied(counters, device.found_inf);
}

}  // namespace dp
