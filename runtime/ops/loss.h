// Softmax and classification loss, as torch.nn.functional.
#pragma once

#include <string>

#include "runtime/tensor/tensor.h"

namespace dp {

enum class Reduction { Mean, Sum, None };

// Over any dim (negative counts from the end); numerically stable (row maximum subtracted).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logits [N, C], target int64 [N] of class indices in [0, C) or ignore_index (anything else is
// an error naming the value). Returns a 0-d loss (Mean, Sum) or per-sample losses [N] (None);
// an ignored sample contributes 0. Mean divides by the number of non-ignored targets. With
// label smoothing ε each sample's loss is (1-ε)·(-log p[target]) + ε·(-Σ_c log p[c])/C, as PyTorch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::Mean,
                     int64_t ignore_index = -100, double label_smoothing = 0.0);

// Top-k accuracy's hits: logits [N, C], target int64 [N] in [0, C); float32 [N], 1 where fewer
// than k classes come before the target in a descending sort, else 0. Before it: a larger logit,
// a NaN (NaN sorts first, as in torch.sort), or an equal logit at a lower class index (ties in
// index order, as a stable sort and argmax: k = 1 is argmax's accuracy). A NaN target logit is
// never a hit. Not differentiable.
Tensor topk_hits(const Tensor& logits, const Tensor& target, int64_t k);

}  // namespace dp
