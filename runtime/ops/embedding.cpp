#include "runtime/ops/embedding.h"

#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"

namespace dp {

// indices int64 [*] (K elements), weight [V, D] → out [*, D].
Tensor embedding(const Tensor& indices, const Tensor& weight, int64_t padding_idx) {
  constexpr const char* op = "embedding";
  check_floating(op, weight);
  check_same_device(op, weight, indices);
  DP_CHECK(indices.dtype() == kInt64, op, ": indices must be int64, got ", indices.str());
  DP_CHECK(weight.dim() == 2, op, ": weight must be [num_embeddings, embedding_dim], got ", weight.str());
  const int64_t V = weight.size(0), D = weight.size(1), K = indices.numel();
  DP_CHECK(padding_idx < V, op, ": padding_idx ", padding_idx, " is out of range for a weight of ", V,
           " rows (a negative padding_idx means none)");
  Tensor flat_indices = indices.detach().contiguous().view({K});
  Tensor rows = Tensor::empty({K, D}, weight.dtype(), weight.device());
  weight.device().backend().embedding_forward(weight.detach().contiguous(), flat_indices, rows);
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  Tensor out = rows.view(out_shape);

  if (any_requires_grad({&weight})) {
    SavedTensor sindices(flat_indices);
    record(op, out, {weight}, [sindices, V, D, K, padding_idx](const Tensor& g, const Node& n) {
      // g [*, D] → dout [K, D]; dweight [V, D]: scatter-add of dout rows
      // The scatter adds: into the gradient already waiting for a tied weight (BERT's decoder's;
      // NOTE [ Summing into a pending gradient ]), else into zeros — its home when offered
      // (NOTE [ Gradient homes ]).
      Tensor dweight = n.pending_sum(0, {V, D}, g.dtype(), g.device());
      if (!dweight.defined()) {
        dweight = n.grad_buffer(0, {V, D}, g.dtype(), g.device());
        dweight.zero_();
      }
      g.device().backend().embedding_backward(g.contiguous().view({K, D}), sindices.get(op), dweight, padding_idx);
      return std::vector<Tensor>{dweight};
    });
  }
  return out;
}

}  // namespace dp
