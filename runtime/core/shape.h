// Shapes and strides (in elements, row-major like PyTorch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dp {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
// Wraps a possibly negative dim into [0, ndim); throws with `what` naming the op.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* what);
// NumPy broadcasting of two shapes; throws naming `what` when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* what);

}  // namespace dp
