#include "optim/optimizer.h"

#include <unordered_set>

#include "runtime/nn/module.h"

namespace dp {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  DP_CHECK(!groups_.empty(), "optimizer: no parameter groups given");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    DP_CHECK(group.lr >= 0 && group.weight_decay >= 0, "optimizer: group ", g, " has invalid lr=", group.lr,
             " or weight_decay=", group.weight_decay, " (both must be >= 0)");
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      DP_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "optimizer: group ", g, " parameter ", i,
               " must be a leaf tensor that requires grad, got ", p.defined() ? p.str() : "an undefined tensor");
      DP_CHECK(seen.insert(&p.impl()).second, "optimizer: group ", g, " parameter ", i, " (", p.str(),
               ") appears more than once");
    }
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) nn::zero_grad(group.params, set_to_none);
}

void Optimizer::set_lr(double lr) {
  DP_CHECK(lr >= 0, "optimizer: set_lr(", lr, "): the learning rate must be >= 0");
  for (ParamGroup& group : groups_) group.lr = lr;
}

}  // namespace dp
