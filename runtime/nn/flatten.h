// Flattens a range of dims into one, as torch.nn.Flatten (default: all but the batch dim).
#pragma once

#include "runtime/nn/module.h"

namespace dp::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  // x [N, C, H, W] → [N, C·H·W] with the defaults; a view when the strides allow.
  Tensor forward(const Tensor& x) override {
    const auto range = forward_range();
    return x.flatten(start_dim, end_dim);
  }

  const int64_t start_dim, end_dim;
};

}  // namespace dp::nn
