// A chain of modules, as torch.nn.Sequential: children are named "0", "1", ... in order, so
// parameters read "features.0.weight".
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "runtime/nn/module.h"

namespace dp::nn {

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  // Registers `module` under the next index.
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_.at(i); }

  // Feeds x through each module in order.
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace dp::nn
