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

void LARS::update(const DeviceStep& device) {
  NoGradGuard no_grad;
  // Every adapted parameter's ‖w‖² and ‖g‖² in one squared_norms call, the trust ratios from them
  // in one lars_trust_ratios call per group, and the updates reading their ratio: all on the
  // parameters' device, so a GPU step never waits for the host here.
  struct Item {
    size_t g, i;
    Tensor param, grad;
    int64_t ratio_index;  // into the step's ratios; -1: not adapted (trust 1)
  };
  std::vector<Item> items;
  std::vector<Tensor> to_norm;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    int64_t index = -1;
    if (groups_[g].adapt) {
      index = static_cast<int64_t>(to_norm.size() / 2);
      to_norm.push_back(param);
      to_norm.push_back(grad);
    }
    items.push_back({g, i, param, grad, index});
  });
  Tensor ratios;
  if (!to_norm.empty()) {
    const Device device = to_norm.front().device();
    for (size_t k = 0; k < to_norm.size(); ++k)
      DP_CHECK(to_norm[k].device() == device, "LARS: parameters on ", device.str(), " and ",
               to_norm[k].device().str(), " (one device per optimiser)");
    const int64_t n = static_cast<int64_t>(to_norm.size() / 2);
    Tensor sq = Tensor::empty({2 * n}, kFloat64, device);
    device.backend().squared_norms(to_norm, sq);  // params and contiguous grads (for_each_param_with_grad)
    ratios = Tensor::empty({n}, kFloat64, device);
    // Adapted items of one group are consecutive: one call per run of the same group.
    for (size_t a = 0; a < items.size();) {
      if (items[a].ratio_index < 0) {
        ++a;
        continue;
      }
      size_t b = a + 1;
      while (b < items.size() && items[b].g == items[a].g) ++b;
      const int64_t first = items[a].ratio_index, count = items[b - 1].ratio_index - first + 1;
      device.backend().lars_trust_ratios(sq.narrow(0, 2 * first, 2 * count), groups_[items[a].g].weight_decay,
                                         options_.eta, options_.eps, ratios.narrow(0, first, count));
      a = b;
    }
  }
  last_ratios_ = ratios;
  std::vector<Tensor> counters;
  std::vector<LarsUpdateItem> updates;
  last_ratio_index_ = per_parameter(std::numeric_limits<double>::quiet_NaN());
  for (const Item& it : items) {
    const ParamGroup& group = groups_[it.g];
    last_ratio_index_[it.g][it.i] = static_cast<double>(it.ratio_index);
    LarsParams p;
    p.lr = group.lr;
    p.momentum = options_.momentum;
    p.weight_decay = group.weight_decay;
    p.trust = 1.0;
    if (it.ratio_index >= 0) {
      p.trust_ratios = ratios;
      p.trust_index = it.ratio_index;
    }
    p.lr_outside_momentum = options_.lr_outside_momentum;
    p.control = control_for(device, it.g, it.i);
    const Tensor& buf = zeroed_buffer(it.g, it.i, "momentum_buffer");
    counters.push_back(p.control.step_count);
    updates.push_back({it.param, it.grad, buf, p});
  }
  if (!updates.empty()) single_device_backend(updates).lars_update_multi(updates);
  for (const LarsUpdateItem& u : updates) u.param.bump_version();
  count_applied(counters, device.found_inf);
}

std::vector<std::vector<double>> LARS::last_trust_ratios() const {
  return trust_ratios_by_index(last_ratio_index_, last_ratios_);  // reads the device
}

}  // namespace dp
