// Stochastic gradient descent with momentum, as torch.optim.SGD (same update, same defaults).
//
// Per parameter, with g its gradient (foreach group: lr, weight_decay):
//   g += weight_decay · p
//   buf = first step ? g : momentum · buf + (1 − dampening) · g      (when momentum ≠ 0)
//   g = nesterov ? g + momentum · buf : buf
//   p −= lr · g
// The first step of a parameter is the first one in which it has a gradient.
#pragma once

#include <vector>

#include "optim/optimizer.h"

namespace dp {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
  double weight_decay = 0.0;
};

class SGD : public Optimizer {
 public:
  // One group with options.lr and options.weight_decay.
  SGD(std::vector<Tensor> params, const SgdOptions& options);
  // Groups carry their own lr and weight_decay; momentum, dampening and nesterov come from options.
  SGD(std::vector<ParamGroup> groups, const SgdOptions& options);

  // Runs Backend::sgd_update once per parameter tensor, under NoGradGuard, and bumps each
  // updated parameter's version. (The kernel walks flat contiguous buffers, so the same call
  // can later cover a whole bucket of parameters packed into one buffer.)
  bool steps_on_device() const override { return true; }
  std::string name() const override { return "sgd"; }

  const SgdOptions& options() const { return options_; }
  // Momentum buffer of param_groups()[group].params[index]; undefined before its first update
  // or when momentum == 0.
  Tensor momentum_buffer(size_t group, size_t index) const { return state_buffer(group, index, "momentum_buffer"); }

 protected:
  void update(const DeviceStep& device) override;
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }

 private:
  SgdOptions options_;
};

}  // namespace dp
