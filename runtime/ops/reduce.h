// Reductions. sum/mean/max over given dims (all dims when none are given).
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

Tensor sum(const Tensor& x);                                        // 0-d
Tensor sum(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim = false);
// Maximum values over dims; the gradient is split evenly among tied maxima, as torch.amax.
Tensor amax(const Tensor& x, const Shape& dims, bool keepdim = false);
// Sums a broadcast gradient back to `shape` (the inverse of expand).
Tensor sum_to(const Tensor& x, const Shape& shape);
// Row-wise argmax of a 2-D tensor, int64 [M]; not differentiable.
Tensor argmax(const Tensor& x, int64_t dim);

}  // namespace dp
