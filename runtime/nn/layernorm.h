// Layer normalisation over the trailing dims, as torch.nn.LayerNorm.
#pragma once

#include "runtime/nn/module.h"

namespace dp::nn {

class LayerNorm : public Module {
 public:
  // Parameters "weight" = 1 and "bias" = 0 of shape normalized_shape (when elementwise_affine).
  LayerNorm(const Shape& normalized_shape, Device device, double eps = 1e-5, bool elementwise_affine = true,
            DType dtype = kFloat32);
  // x [*, *normalized_shape] → same shape
  Tensor forward(const Tensor& x) override;

  const Shape normalized_shape;
  const double eps;
  Tensor weight, bias;  // undefined when !elementwise_affine
};

}  // namespace dp::nn
