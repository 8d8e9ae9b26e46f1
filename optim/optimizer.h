// Optimiser interface over parameter groups, as torch.optim.Optimizer.
//
// A group is a list of parameters sharing a learning rate and weight decay. Per-parameter
// state (e.g. SGD's momentum buffers) is kept by the concrete optimiser, indexed [group][param]
// in construction order: the order torch's state_dict numbers parameters in, so it can be
// saved and restored by position.
#pragma once

#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  // Each parameter must be a leaf that requires grad and appear in only one group.
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; parameters without one are skipped.
  virtual void step() = 0;
  // set_to_none drops the gradients; otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Sets the learning rate of every group (what an LR schedule drives each step).
  void set_lr(double lr);
  // Mutable for lr / weight_decay; the parameter lists are fixed at construction.
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

 protected:
  std::vector<ParamGroup> groups_;
};

}  // namespace dp
