#include "models/mlp.h"

#include "runtime/nn/activation.h"
#include "runtime/nn/dropout.h"
#include "runtime/nn/linear.h"

namespace dp {

MLP::MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t num_classes, double dropout,
         Device device, Generator& gen) {
  flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  layers = register_module("layers", std::make_shared<nn::Sequential>());
  int64_t width = in_features;
  for (int64_t h : hidden) {
    layers->push_back(std::make_shared<nn::Linear>(width, h, device, gen));
    layers->push_back(std::make_shared<nn::ReLU>());
    if (dropout > 0) layers->push_back(std::make_shared<nn::Dropout>(dropout, gen));
    width = h;
  }
  layers->push_back(std::make_shared<nn::Linear>(width, num_classes, device, gen));
}

Tensor MLP::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, *] → [N, in_features] → logits [N, classes]
  return layers->forward(flatten->forward(x));
}

}  // namespace dp
