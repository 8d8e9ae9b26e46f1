#include "runtime/nn/layernorm.h"

#include "runtime/ops/creation.h"
#include "runtime/ops/norm.h"

namespace dp::nn {

LayerNorm::LayerNorm(const Shape& normalized_shape, Device device, double eps, bool elementwise_affine, DType dtype)
    : normalized_shape(normalized_shape), eps(eps) {
  DP_CHECK(!normalized_shape.empty() && numel_of(normalized_shape) > 0 && eps > 0,
           "LayerNorm: invalid normalized_shape ", shape_str(normalized_shape), " or eps=", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(normalized_shape, dtype, device));
    bias = register_parameter("bias", zeros(normalized_shape, dtype, device));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [*, *normalized_shape] → same shape
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

}  // namespace dp::nn
