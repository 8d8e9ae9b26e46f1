#include "runtime/nn/activation.h"

#include "runtime/ops/elementwise.h"

namespace dp::nn {

Tensor Activation::forward(const Tensor& x) { return unary_op(op_, x); }

}  // namespace dp::nn
