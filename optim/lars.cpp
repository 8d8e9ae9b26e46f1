#include "optim/lars.h"

#include <cmath>
#include <limits>

#include "optim/clip_grad.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"

namespace dp {

LARS::LARS(std::vector<Tensor> params, const LarsOptions& options)
    : LARS(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr, options.weight_decay}}, options) {}

LARS::LARS(std::vector<ParamGroup> groups, const LarsOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  DP_CHECK(options.momentum >= 0 && options.eta > 0 && options.eps >= 0, "LARS: invalid momentum=", options.momentum,
           ", eta=", options.eta, " or eps=", options.eps, " (momentum >= 0, eta > 0, eps >= 0)");
}

double LARS::trust_ratio(double w_norm, double g_norm, double weight_decay, double eta, double eps) {
  if (w_norm == 0 || g_norm == 0) return 1.0;
  return eta * w_norm / (g_norm + weight_decay * w_norm + eps);
}

void LARS::step() {
  NoGradGuard no_grad;
  // Every adapted parameter's ‖w‖ and ‖g‖ in one pass (one host sync per step).
  struct Item {
    size_t g, i;
    Tensor param, grad;
  };
  std::vector<Item> items;
  std::vector<Tensor> to_norm;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    items.push_back({g, i, param, grad});
    if (groups_[g].adapt) {
      to_norm.push_back(param);
      to_norm.push_back(grad);
    }
  });
  const std::vector<double> sq = squared_norms(to_norm);
  last_trust_ = per_parameter(std::numeric_limits<double>::quiet_NaN());
  size_t k = 0;
  for (const Item& it : items) {
    const ParamGroup& group = groups_[it.g];
    double trust = 1.0;
    if (group.adapt) {
      trust = trust_ratio(std::sqrt(sq[k]), std::sqrt(sq[k + 1]), group.weight_decay, options_.eta, options_.eps);
      k += 2;
    }
    last_trust_[it.g][it.i] = trust;
    LarsParams p;
    p.lr = group.lr;
    p.momentum = options_.momentum;
    p.weight_decay = group.weight_decay;
    p.trust = trust;
    p.lr_outside_momentum = options_.lr_outside_momentum;
    const Tensor& buf = zeroed_buffer(it.g, it.i, "momentum_buffer");
    it.param.device().backend().lars_update(it.param, it.grad, buf, p);
    ++state(it.g, it.i).step;
    it.param.bump_version();
  }
}

}  // namespace dp
