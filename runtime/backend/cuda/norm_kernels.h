// Launchers for the normalisation kernels in norm.cu (conventions in kernel_types.h): batch norm
// where cuDNN is not used (see norm.cpp for when) and layer norm (always).
//
// Dtypes: the activations (x, y, dy, dx) are in `dtype` (float32, float64, float16, bfloat16).
// Every per-channel / per-feature / per-row array (weight, bias, running stats, saved statistics,
// dweight, dbias) is in ONE `param_dtype`, which is either `dtype` itself or its accumulation
// type (float32 for float16/bfloat16, float64 for float64); the front-end casts into temporaries
// when the tensors it was given are neither. Any other combination returns
// cudaErrorInvalidValue and launches nothing. Every array is contiguous.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// ---- Batch norm -------------------------------------------------------------------------------

// x viewed as [N, C, S]: S is the product of the dims after C (1 for an input [N, C]).
struct BatchNormShape {
  int64_t N = 0, C = 0, S = 0;
};

// x, y [N, C, S]; the rest [C] in param_dtype. weight/bias null: ones/zeros. Training: running
// stats null → not updated; save_mean/save_invstd required. Eval: running stats required,
// save_* unused. Epilogue, in the same pass: y = relu(bn(x) + residual), residual [N, C, S] like
// x (null: none), relu off: no clamp.
struct BatchNormForwardArgs {
  const void* x = nullptr;
  void* y = nullptr;
  const void* residual = nullptr;
  bool relu = false;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  void* save_mean = nullptr;
  void* save_invstd = nullptr;
};

// dy, x, dx [N, C, S]; weight, save_mean, save_invstd, dweight, dbias, bias [C] in param_dtype.
// weight null: ones. dx, dweight, dbias null: not computed. relu (training, param_dtype the
// accumulation type, the forward run by launch_batch_norm_forward with relu and no residual): dy
// is masked where that forward's y was not positive, y recomputed from x, the saved statistics,
// weight and bias (null: zeros) with the forward's own arithmetic — bit for bit relu's backward
// (BatchNormGradPrologue in backend.h).
struct BatchNormBackwardArgs {
  const void* dy = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* save_mean = nullptr;
  const void* save_invstd = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
  bool relu = false;
  const void* bias = nullptr;
  // relu's mask from the forward's output (y > 0) instead, folded into the sums pass, which writes
  // the masked gradient to masked_dy; dx is computed from it (BatchNormGradPrologue::relu_output).
  const void* relu_output = nullptr;
  void* masked_dy = nullptr;
};

// Device scratch (bytes, 16-byte aligned start expected) both batch-norm launchers need for
// this shape: per-(channel, split) partial sums and per-channel coefficients.
size_t batch_norm_workspace_bytes(DType dtype, BatchNormShape shape);

// Training: batch statistics (shifted sums as the CPU backend, accumulated in float, double for
// float64), running stats updated with `momentum` (unbiased variance), save_mean and
// save_invstd = 1/sqrt(var + eps) written, then y. Eval: y from the running stats.
cudaError_t launch_batch_norm_forward(const BatchNormForwardArgs& args, DType dtype, DType param_dtype,
                                      BatchNormShape shape, bool training, double momentum, double eps,
                                      void* workspace, cudaStream_t stream);

// Training: dx = w·invstd·(dy - mean(dy) - x̂·mean(dy·x̂)); eval: dx = w·invstd·dy.
// dweight = Σ dy·(x - mean)·invstd, dbias = Σ dy (both modes); dy masked first with args.relu
// (training only: cudaErrorInvalidValue in eval, or when param_dtype is not the accumulation type).
cudaError_t launch_batch_norm_backward(const BatchNormBackwardArgs& args, DType dtype, DType param_dtype,
                                       BatchNormShape shape, bool training, void* workspace,
                                       cudaStream_t stream);

// ---- Layer norm -------------------------------------------------------------------------------

// x, y [M, N] normalised over N; weight, bias [N] (null: ones/zeros); save_mean, save_rstd [M].
cudaError_t launch_layer_norm_forward(const void* x, const void* weight, const void* bias, void* y,
                                      void* save_mean, void* save_rstd, DType dtype, DType param_dtype,
                                      int64_t M, int64_t N, double eps, cudaStream_t stream);

// Device scratch (bytes) layer_norm_backward needs for dweight/dbias (0 when neither is wanted).
size_t layer_norm_workspace_bytes(DType dtype, int64_t M, int64_t N, bool param_grads);

// dy, x, dx [M, N]; weight, dweight, dbias [N]; save_mean, save_rstd [M]. weight null: ones.
// dx, dweight, dbias null: not computed. dweight/dbias are deterministic column sums (per-block
// partials in `workspace`, then a fixed-order sum).
cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const void* weight, const void* save_mean,
                                       const void* save_rstd, void* dx, void* dweight, void* dbias, DType dtype,
                                       DType param_dtype, int64_t M, int64_t N, void* workspace,
                                       cudaStream_t stream);

}  // namespace dp::cuda
