// Normalisation layers' functional forms, as torch.nn.functional.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// x [N, C, *]; weight/bias [C] optional; running stats [C] updated in place in training.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps);
// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps);

}  // namespace dp
