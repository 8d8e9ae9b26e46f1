// Mixed precision's op policy: which dtype each op runs in while autocast is on (thread-local,
// like grad mode and torch.autocast).
//
// NOTE [ Autocast policy ]
// One table (autocast_policy() in autocast.cpp, written out in docs/mixed_precision.md) says for
// every op that consults it how its floating inputs are cast while autocast is on:
//   - LowerPrecision (matmul, linear, conv2d): float32 inputs are cast to the autocast dtype
//     (bfloat16 or float16); the op runs and returns that dtype, accumulating in float32.
//   - Float32 (softmax, log_softmax, cross_entropy, sum/mean reductions, exp, log, pow,
//     reciprocal, rsqrt): low-precision inputs are cast to float32 first, for range and accuracy.
//   - Normalisation (batch_norm, layer_norm): activations keep their dtype, the per-feature
//     tensors (weight, bias, running and saved statistics) stay float32, statistics are computed
//     in float32 (mixed dtypes by contract, as cuDNN and apex do; PyTorch casts layer_norm's
//     input to float32 instead, which doubles the activation memory of a Transformer).
//   - Anything else (relu, pooling, dropout, reshapes, embedding) runs in its input's dtype, and a
//     binary op of two floating dtypes runs in the wider one (PyTorch's type promotion), with or
//     without autocast.
// float64 tensors are never cast (as in PyTorch). Parameters stay float32: the casts are
// differentiable (Tensor::to), so a parameter's gradient arrives in float32 (master weights).
// Backward runs with autocast off (Engine): gradients follow the dtypes the forward chose.
// Unlike torch.autocast, casts of parameters are not cached across uses in one region: a
// training step uses each weight once.
#pragma once

#include <initializer_list>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/tensor/tensor.h"

namespace dp {

class Autocast {
 public:
  // The low-precision dtype ops cast to, or kFloat32 when autocast is off on this thread.
  static DType dtype();
  static bool enabled() { return dtype() != kFloat32; }
  // kFloat32 turns autocast off; kBFloat16 / kFloat16 turn it on; anything else is an error.
  static void set_dtype(DType dtype);
};

// RAII: autocast to `dtype` (kFloat32: off) in a scope, restoring the previous state.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype) : prev_(Autocast::dtype()) { Autocast::set_dtype(dtype); }
  ~AutocastGuard() { Autocast::set_dtype(prev_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType prev_;
};

enum class AutocastOp {
  Matmul, Linear, Conv2d,                                  // LowerPrecision
  Softmax, LogSoftmax, CrossEntropy, Sum, Mean, Exp, Log,  // Float32
  Pow, Reciprocal, Rsqrt,
  BatchNorm, LayerNorm,                                    // Normalisation
};
enum class CastPolicy { LowerPrecision, Float32, Normalisation };

CastPolicy autocast_policy(AutocastOp op);
const char* autocast_op_name(AutocastOp op);

// The dtype `op` computes in for inputs of `dtype` under the current autocast state: `dtype`
// itself when autocast is off, the input is not float32/float16/bfloat16 (float64, integers),
// or the op's policy keeps activations as they are.
DType autocast_dtype_for(AutocastOp op, DType dtype);

// `t` cast (differentiably) to autocast_dtype_for(op, t.dtype()); undefined tensors pass through.
Tensor autocast_input(AutocastOp op, const Tensor& t);

}  // namespace dp
