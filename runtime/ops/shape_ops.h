// Joining and splitting along a dim.
#pragma once

#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// Views of consecutive chunks with the given sizes (must sum to the dim's size).
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim);

}  // namespace dp
