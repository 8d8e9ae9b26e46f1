#include "runtime/nn/embedding.h"

#include "runtime/nn/init.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/embedding.h"

namespace dp::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device, Generator& gen,
                     int64_t padding_idx, DType dtype)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim), padding_idx(padding_idx) {
  DP_CHECK(num_embeddings > 0 && embedding_dim > 0 && padding_idx < num_embeddings,
           "Embedding: invalid num_embeddings=", num_embeddings, " embedding_dim=", embedding_dim,
           " padding_idx=", padding_idx);
  Tensor w = empty({num_embeddings, embedding_dim}, dtype, device);
  init::normal_(w, gen);
  if (padding_idx >= 0) {
    Tensor padding_row = w.select(0, padding_idx);
    init::zeros_(padding_row);
  }
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& indices) {
  const auto range = forward_range();
  // indices int64 [*], weight [V, D] → [*, D]
  DP_CHECK(indices.dtype() == kInt64, "Embedding(", num_embeddings, ", ", embedding_dim,
           "): expected int64 indices, got ", indices.str());
  return embedding(indices, weight, padding_idx);
}

}  // namespace dp::nn
