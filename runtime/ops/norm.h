// Normalisation layers' functional forms, as torch.nn.functional. Optional tensors are passed
// as an undefined Tensor().
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// x [N, C, *]; weight/bias [C] optional. Training normalises with the batch statistics and, when
// running_mean/running_var [C] are given, updates them in place (outside autograd; their
// versions are bumped): new = (1 - momentum)·old + momentum·batch, with the unbiased batch
// variance as PyTorch. Eval normalises with the running statistics, which are then required.
// Backward in both modes (in eval the statistics are constants).
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps);
// relu(batch_norm(x, ...) + residual), residual optional (undefined: relu(batch_norm(x, ...))),
// with the add and the relu applied as the normalised values are written: one pass over the
// output instead of three, and neither intermediate is kept (ResNet's bn → relu and
// bn → add → relu). Values: the composition's (float32 and float64 bitwise; float16/bfloat16 are
// rounded once instead of after each op). A residual that would broadcast or promote runs as the
// composition.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                           double eps);
// Normalises over the trailing dims given by normalized_shape; weight/bias of that shape, optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps);

}  // namespace dp
