// Matrix products.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// a [M, K] @ b [K, N] → [M, N]; or batched [B, M, K] @ [B, K, N] (either side may be 2-D and is
// then broadcast over the batch). Transposed views are used as they are, without copies.
Tensor matmul(const Tensor& a, const Tensor& b);
// y = x @ weightᵀ + bias, x [*, in], weight [out, in], bias [out] (optional) — torch's linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace dp
