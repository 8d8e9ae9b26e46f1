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
  momentum_buffers_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) momentum_buffers_[g].resize(groups_[g].params.size());
}

void SGD::step() {
  NoGradGuard no_grad;
  const bool use_momentum = options_.momentum != 0.0;
  DP_CHECK(groups_.size() == momentum_buffers_.size(), "SGD: parameter groups were added after construction");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    DP_CHECK(group.params.size() == momentum_buffers_[g].size(), "SGD: group ", g,
             " gained or lost parameters after construction (its state is indexed by position)");
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      // param, grad, buf: same shape, contiguous (the kernel walks them as flat buffers)
      DP_CHECK(param.is_contiguous() && grad.dtype() == param.dtype(), "SGD: parameter ", i, " of group ", g,
               " must be contiguous with a gradient of its dtype, got param ", param.str(), " grad ", grad.str());
      grad = grad.contiguous();
      Tensor& buf = momentum_buffers_[g][i];
      SgdParams p;
      p.lr = group.lr;
      p.weight_decay = group.weight_decay;
      p.momentum = options_.momentum;
      p.dampening = options_.dampening;
      p.nesterov = options_.nesterov;
      p.first_step = use_momentum && !buf.defined();
      if (p.first_step) buf = Tensor::empty(param.shape(), param.dtype(), param.device());
      param.device().backend().sgd_update(param, grad, buf, p);
      param.bump_version();
    }
  }
}

}  // namespace dp
