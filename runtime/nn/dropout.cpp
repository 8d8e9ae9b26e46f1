#include "runtime/nn/dropout.h"

#include "runtime/ops/dropout.h"

namespace dp::nn {

Dropout::Dropout(double p, Generator& gen) : p(p), gen_(&gen) {
  DP_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  const auto range = forward_range();
  return dropout(x, p, is_training(), *gen_);
}

}  // namespace dp::nn
