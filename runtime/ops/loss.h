// Softmax and classification loss, as torch.nn.functional.
#pragma once

#include <string>

#include "runtime/tensor/tensor.h"

namespace dp {

enum class Reduction { Mean, Sum, None };

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logits [N, C], target int64 [N]. Mean divides by the number of non-ignored targets.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);

}  // namespace dp
