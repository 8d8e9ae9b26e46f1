// Inverted dropout, as torch.nn.functional.dropout.
#pragma once

#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

namespace dp {

// In training, zeroes each element with probability p and scales the rest by 1/(1-p); the mask
// comes from `gen`. Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace dp
