#include "runtime/nn/activation.h"

#include "runtime/ops/elementwise.h"

namespace dp::nn {

Tensor Activation::forward(const Tensor& x) {
  const auto range = forward_range();
  return unary_op(op_, x);
}

}  // namespace dp::nn
