#include "optim/lamb.h"

#include <cmath>
#include <limits>

#include "optim/adamw.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"

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
    int64_t ratio_index;  // into the step's ratios; -1: not adapted (r = 1)
  };
  std::vector<Item> items;
  std::vector<Tensor> grads;
  int64_t adapted = 0;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    const bool adapt = groups_[g].adapt && groups_[g].weight_decay != 0;
    items.push_back({g, i, param, grad, Tensor(), adapt ? adapted++ : -1});
    grads.push_back(grad);
  });
  if (items.empty()) return;
  const Device dev = items.front().param.device();
  for (const Item& it : items)
    DP_CHECK(it.param.device() == dev, "LAMB: parameters on ", dev.str(), " and ", it.param.device().str(),
             " (one device per optimiser)");
  Backend& backend = dev.backend();

  // Stage 0: the global gradient norm N. clip_coefficient sums the squared norms in index order
  // (as global_norm) and flags a non-finite N in found_inf; apex's divisor is taken from N where
  // the kernels run (AdamParams::grad_norm). Its coefficient output is not used.
  const Tensor grad_squares = Tensor::empty({static_cast<int64_t>(grads.size())}, kFloat64, dev);
  backend.squared_norms(grads, grad_squares);
  const Tensor norm_and_coef = Tensor::empty({2}, kFloat64, dev);
  const Tensor found_inf = device.found_inf.defined() ? device.found_inf : zeros({}, kFloat32, dev);
  backend.clip_coefficient(grad_squares, options_.max_grad_norm > 0 ? options_.max_grad_norm : 1.0, found_inf,
                           norm_and_coef);
  last_grad_norm_ = norm_and_coef.narrow(0, 0, 1);

  // Stage 1: moments and the update direction u.
  std::vector<Tensor> to_norm, counters;
  std::vector<LambDirectionItem> directions;
  for (Item& it : items) {
    AdamParams p;
    p.lr = groups_[it.g].lr;
    p.weight_decay = groups_[it.g].weight_decay;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    if (options_.max_grad_norm > 0) {
      p.grad_norm = last_grad_norm_;
      p.max_grad_norm = options_.max_grad_norm;
    }
    p.control = control_for(device, it.g, it.i);
    counters.push_back(p.control.step_count);
    const Tensor& m = zeroed_buffer(it.g, it.i, "exp_avg");
    const Tensor& v = zeroed_buffer(it.g, it.i, "exp_avg_sq");
    it.update = Tensor::empty(it.param.shape(), it.param.dtype(), dev);
    directions.push_back({it.param, it.grad, m, v, it.update, p});
    if (it.ratio_index >= 0) {
      to_norm.push_back(it.param);
      to_norm.push_back(it.update);
    }
  }
  backend.lamb_direction_multi(directions);
  // Stage 2: ‖w‖ and ‖u‖ in one pass; r = ‖w‖ / ‖u‖ (1 when either is 0) is LARS's trust ratio
  // with η = 1, λ = 0, ε = 0 — the same double arithmetic, bit for bit; then w ← w − lr·r·u.
  last_ratios_ = Tensor();
  if (adapted > 0) {
    const Tensor sq = Tensor::empty({2 * adapted}, kFloat64, dev);
    backend.squared_norms(to_norm, sq);
    last_ratios_ = Tensor::empty({adapted}, kFloat64, dev);
    backend.lars_trust_ratios(sq, /*weight_decay=*/0.0, /*eta=*/1.0, /*eps=*/0.0, last_ratios_);
  }
  last_ratio_index_ = per_parameter(std::numeric_limits<double>::quiet_NaN());
  std::vector<LambUpdateItem> updates;
  for (const Item& it : items) {
    last_ratio_index_[it.g][it.i] = static_cast<double>(it.ratio_index);
    LambUpdateParams p;
    p.lr = groups_[it.g].lr;
    if (it.ratio_index >= 0) {
      p.trust_ratios = last_ratios_;
      p.trust_index = it.ratio_index;
    }
    p.control = control_for(device, it.g, it.i);
    updates.push_back({it.param, it.update, p});
  }
  backend.lamb_update_multi(updates);
  for (const Item& it : items) it.param.bump_version();
  count_applied(counters, device.found_inf);
}

double LAMB::last_grad_norm() const {
  return last_grad_norm_.defined() ? last_grad_norm_.item<double>() : 0.0;  // reads the device
}

std::vector<std::vector<double>> LAMB::last_trust_ratios() const {
  return trust_ratios_by_index(last_ratio_index_, last_ratios_);  // reads the device
}

}  // namespace dp
