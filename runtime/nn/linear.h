// Fully connected layer, as torch.nn.Linear: y = x @ weightᵀ + bias.
#pragma once

#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp::nn {

class Linear : public Module {
 public:
  // Parameters "weight" [out, in] and "bias" [out] (when `with_bias`), torch's default init.
  Linear(int64_t in_features, int64_t out_features, Device device, Generator& gen, bool with_bias = true,
         DType dtype = kFloat32);
  // x [*, in] → [*, out]
  Tensor forward(const Tensor& x) override;

  const int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when built without
};

}  // namespace dp::nn
