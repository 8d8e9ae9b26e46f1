// Inverted dropout, as torch.nn.Dropout.
#pragma once

#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp::nn {

class Dropout : public Module {
 public:
  // Masks are drawn from `gen`, which is held by reference and must outlive this module.
  Dropout(double p, Generator& gen);
  // Training: zeroes each element with probability p, scales the rest by 1/(1-p). Eval: identity.
  Tensor forward(const Tensor& x) override;

  const double p;

 private:
  Generator* gen_;
};

}  // namespace dp::nn
