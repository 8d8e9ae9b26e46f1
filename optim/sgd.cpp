#include "optim/sgd.h"

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"

namespace dp {

namespace {
ParamGroup single_group(std::vector<Tensor> params, const SgdOptions& o) {
  return ParamGroup{std::move(params), o.lr, o.weight_decay};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, const SgdOptions& options)
    : SGD(std::vector<ParamGroup>{single_group(std::move(params), options)}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SgdOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  const SgdOptions& o = options_;
  DP_CHECK(o.momentum >= 0 && o.dampening >= 0, "SGD: invalid momentum=", o.momentum, " or dampening=",
           o.dampening, " (both must be >= 0)");
  DP_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum=", o.momentum,
           " dampening=", o.dampening);
}

void SGD::update(const DeviceStep& device) {
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum != 0.0;
  std::vector<Tensor> counters;
  std::vector<SgdUpdateItem> items;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    SgdParams p;
    p.lr = groups_[g].lr;
    p.weight_decay = groups_[g].weight_decay;
    p.momentum = options_.momentum;
    p.dampening = options_.dampening;
    p.nesterov = options_.nesterov;
    // The first step (buffer = the gradient) is the kernel's to decide from the step count; the
    // buffer starts zeroed so that a skipped first step leaves defined memory.
    p.control = control_for(device, g, i);
    const Tensor buf = use_momentum ? zeroed_buffer(g, i, "momentum_buffer") : Tensor();
    counters.push_back(p.control.step_count);
    items.push_back({param, grad, buf, p});
  });
  // One multi-tensor call for the whole step (the kernels launch per parameter group).
  if (!items.empty()) single_device_backend(items).sgd_update_multi(items);
  for (const SgdUpdateItem& it : items) it.param.bump_version();
  count_applied(counters, device.found_inf);
}

}  // namespace dp
