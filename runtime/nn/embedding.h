// Lookup table, as torch.nn.Embedding.
#pragma once

#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp::nn {

class Embedding : public Module {
 public:
  // Parameter "weight" [num_embeddings, embedding_dim] ~ N(0, 1); the padding_idx row (when
  // >= 0) is zero and receives no gradient.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device, Generator& gen, int64_t padding_idx = -1,
            DType dtype = kFloat32);
  // indices int64 [*] → [*, embedding_dim]
  Tensor forward(const Tensor& indices) override;

  const int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;
};

}  // namespace dp::nn
