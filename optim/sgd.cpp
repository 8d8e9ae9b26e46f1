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

void SGD::step() {
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum != 0.0;
  for_each_param_with_grad([&](size_t g, size_t i, const Tensor& param, const Tensor& grad) {
    ParamState& s = state(g, i);
    Tensor& buf = s.buffers["momentum_buffer"];
    SgdParams p;
    p.lr = groups_[g].lr;
    p.weight_decay = groups_[g].weight_decay;
    p.momentum = options_.momentum;
    p.dampening = options_.dampening;
    p.nesterov = options_.nesterov;
    p.first_step = use_momentum && !buf.defined();
    if (p.first_step) buf = Tensor::empty(param.shape(), param.dtype(), param.device());
    param.device().backend().sgd_update(param, grad, buf, p);
    if (!use_momentum) s.buffers.erase("momentum_buffer");
    ++s.step;
    param.bump_version();
  });
}

}  // namespace dp
