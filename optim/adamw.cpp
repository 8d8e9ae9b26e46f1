#include "optim/adamw.h"

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"

namespace dp {

void check_adam_options(const char* who, double beta1, double beta2, double eps) {
  DP_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, who, ": betas must be in [0, 1), got (", beta1,
           ", ", beta2, ")");
  DP_CHECK(eps >= 0, who, ": eps must be >= 0, got ", eps);
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{std::move(params), options.lr, options.weight_decay}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  check_adam_options("AdamW", options.beta1, options.beta2, options.eps);
}

void AdamW::update(const DeviceStep& device) {
  NoGradGuard no_grad;
  std::vector<Tensor> counters;
  std::vector<AdamwUpdateItem> items;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    const Tensor& m = zeroed_buffer(g, i, "exp_avg");
    const Tensor& v = zeroed_buffer(g, i, "exp_avg_sq");
    AdamParams p;
    p.lr = groups_[g].lr;
    p.weight_decay = groups_[g].weight_decay;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.control = control_for(device, g, i);  // the step count and bias correction on the device
    counters.push_back(p.control.step_count);
    items.push_back({param, grad, m, v, p});
  });
  if (!items.empty()) single_device_backend(items).adamw_update_multi(items);
  for (const AdamwUpdateItem& it : items) it.param.bump_version();
  count_applied(counters, device.found_inf);
}

}  // namespace dp
