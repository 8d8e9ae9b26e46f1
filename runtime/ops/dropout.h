// Inverted dropout, as torch.nn.functional.dropout.
#pragma once

#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

namespace dp {

// p in [0, 1) (else an error). In training, zeroes each element with probability p and scales
// the rest by 1/(1-p); the mask comes from `gen` (advancing it by x.numel() counters), so a
// seed and offset reproduce it on any device. Returns x itself when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

}  // namespace dp
