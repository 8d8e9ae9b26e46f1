// Embedding lookup, as torch.nn.functional.embedding.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// indices int64 of any shape, each in [0, V) (else an error naming the index), weight [V, D]
// → [*indices.shape, D]. Rows equal to padding_idx are looked up but get no gradient
// (padding_idx < 0: none).
Tensor embedding(const Tensor& indices, const Tensor& weight, int64_t padding_idx = -1);

}  // namespace dp
