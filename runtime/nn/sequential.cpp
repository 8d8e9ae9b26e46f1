#include "runtime/nn/sequential.h"

#include <string>

namespace dp::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const std::shared_ptr<Module>& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(layers_.size()), module);
  layers_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  const auto range = forward_range();
  Tensor h = x;
  for (const std::shared_ptr<Module>& m : layers_) h = m->forward(h);
  return h;
}

}  // namespace dp::nn
