// Launchers for the CUDA kernels in softmax_loss.cu: softmax / log-softmax over the last dim of
// contiguous [M, N] rows (attention's scaled and masked softmax too), and the fused
// cross-entropy forward (log-softmax + per-sample loss) and backward (conventions in
// kernel_types.h). Floating dtypes only (float32, float64, float16, bfloat16); half types compute
// in float, float64 in double.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// Attention's additive mask (backend.h's attention_softmax_forward): contiguous float32
// [Bm, rows, N]; row m of the scores adds mask row (per_batch ? m / rows_per_batch : 0)·rows +
// (m mod rows_per_batch) mod rows. data null: no mask.
struct AttentionMask {
  const float* data = nullptr;
  int64_t rows = 1;            // Q: 1 (one key mask per batch) or the query count
  int64_t rows_per_batch = 1;  // R: score rows per batch element (heads × queries), a multiple of rows
  bool per_batch = false;      // Bm == B (else 1: one mask for every batch element)
};

// x, y [M, N] contiguous, same dtype; each row's logits are z = scale·x + its mask row (plain
// softmax: scale 1, no mask). log: y = z − logΣexp(z); else y = exp(z − max) / Σ.
cudaError_t launch_softmax_forward(const void* x, const AttentionMask& mask, void* y, DType dtype, int64_t M,
                                   int64_t N, bool log, double scale, cudaStream_t stream);

// y (the forward output), dy, dx [M, N] contiguous, same dtype.
// softmax: dx = scale·y·(dy − Σ dy·y); log_softmax: dx = dy − exp(y)·Σ dy (scale unused).
cudaError_t launch_softmax_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t M, int64_t N,
                                    bool log, double scale, cudaStream_t stream);

// logits, log_probs [M, C] contiguous (dtype); target int64 [M]; losses [M] (dtype).
// loss = −(1−ε)·log p[t] − (ε/C)·Σ_c log p[c]; 0 where t == ignore_index. A target outside
// [0, C) that is not ignore_index is recorded in `errors` (NOTE [ Device errors ]) and its loss
// is NaN. C >= 1 when M > 0.
cudaError_t launch_cross_entropy_forward(const void* logits, const int64_t* target, void* log_probs, void* losses,
                                         DType dtype, int64_t M, int64_t C, int64_t ignore_index,
                                         double label_smoothing, DeviceErrors* errors, cudaStream_t stream);

// log_probs, dlogits [M, C] contiguous; target int64 [M]; dlosses [M] contiguous (dtype).
// dlogits = dloss·(exp(log_probs) − ε/C − (1−ε)·onehot(t)); zero rows where t == ignore_index
// or t is out of range (recorded in `errors` as in the forward).
cudaError_t launch_cross_entropy_backward(const void* log_probs, const int64_t* target, const void* dlosses,
                                          void* dlogits, DType dtype, int64_t M, int64_t C, int64_t ignore_index,
                                          double label_smoothing, DeviceErrors* errors, cudaStream_t stream);

}  // namespace dp::cuda
