// Attention's building blocks beyond matmul.
//
// NOTE [ Attention softmax ]
// attention_softmax(scores, mask, scale) = softmax(scale·scores + mask) over the keys, in one
// kernel forward and one backward (Megatron's "scaled masked softmax"): the composed form —
// mul by the scale, add the broadcast mask, softmax — read and wrote the [B, heads, S, S] scores
// three times forward and twice backward, and under autocast added two casts (softmax runs in
// float32 under autocast, so bf16 scores went to float32 and the probabilities back to bf16 for
// the next matmul). Here the kernel reads the scores in their dtype, computes in float32 (float64
// for float64) and writes the probabilities in the scores' dtype, as fused attention kernels
// (cuDNN's, FlashAttention) do: under autocast the probabilities are bf16/fp16 where PyTorch's
// eager attention has them in float32 until its next matmul casts them (docs/mixed_precision.md).
// The mask is additive (0 keeps, a large negative value masks: models/bert.h's masks) and gets
// no gradient; a row whose keys are all masked comes out uniform, as the composed form's did.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// scores [B, H, Sq, Sk] (any floating dtype, contiguous or not); mask undefined or [B or 1, 1,
// 1 or Sq, Sk], any floating dtype (applied in float32), not requiring grad. Returns
// softmax(scale·scores + mask) over the last dim, [B, H, Sq, Sk] in scores' dtype.
Tensor attention_softmax(const Tensor& scores, const Tensor& mask, double scale);

}  // namespace dp
