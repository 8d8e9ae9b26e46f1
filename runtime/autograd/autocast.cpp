#include "runtime/autograd/autocast.h"

#include "runtime/core/error.h"

namespace dp {

namespace {
thread_local DType autocast_dtype = kFloat32;  // per thread, as grad mode

bool castable(DType dtype) { return dtype == kFloat32 || is_low_precision(dtype); }
}  // namespace

DType Autocast::dtype() { return autocast_dtype; }

void Autocast::set_dtype(DType dtype) {
  DP_CHECK(dtype == kFloat32 || dtype == kBFloat16 || dtype == kFloat16,
           "autocast: the low-precision dtype must be bfloat16 or float16 (float32 turns autocast off), got ",
           dtype_name(dtype));
  autocast_dtype = dtype;
}

// NOTE [ Autocast policy ] in autocast.h; docs/mixed_precision.md lists the same table.
CastPolicy autocast_policy(AutocastOp op) {
  switch (op) {
    case AutocastOp::Matmul: case AutocastOp::Linear: case AutocastOp::Conv2d:
      return CastPolicy::LowerPrecision;
    case AutocastOp::Softmax: case AutocastOp::LogSoftmax: case AutocastOp::CrossEntropy:
    case AutocastOp::Sum: case AutocastOp::Mean: case AutocastOp::Exp: case AutocastOp::Log:
    case AutocastOp::Pow: case AutocastOp::Reciprocal: case AutocastOp::Rsqrt:
      return CastPolicy::Float32;
    case AutocastOp::BatchNorm: case AutocastOp::LayerNorm:
      return CastPolicy::Normalisation;
  }
  throw Error("autocast_policy: unknown op");
}

const char* autocast_op_name(AutocastOp op) {
  switch (op) {
    case AutocastOp::Matmul: return "matmul";
    case AutocastOp::Linear: return "linear";
    case AutocastOp::Conv2d: return "conv2d";
    case AutocastOp::Softmax: return "softmax";
    case AutocastOp::LogSoftmax: return "log_softmax";
    case AutocastOp::CrossEntropy: return "cross_entropy";
    case AutocastOp::Sum: return "sum";
    case AutocastOp::Mean: return "mean";
    case AutocastOp::Exp: return "exp";
    case AutocastOp::Log: return "log";
    case AutocastOp::Pow: return "pow";
    case AutocastOp::Reciprocal: return "reciprocal";
    case AutocastOp::Rsqrt: return "rsqrt";
    case AutocastOp::BatchNorm: return "batch_norm";
    case AutocastOp::LayerNorm: return "layer_norm";
  }
  return "?";
}

DType autocast_dtype_for(AutocastOp op, DType dtype) {
  const DType low = Autocast::dtype();
  if (low == kFloat32 || !castable(dtype)) return dtype;
  switch (autocast_policy(op)) {
    case CastPolicy::LowerPrecision: return low;
    case CastPolicy::Float32: return kFloat32;
    case CastPolicy::Normalisation: return dtype;
  }
  return dtype;
}

Tensor autocast_input(AutocastOp op, const Tensor& t) {
  if (!t.defined()) return t;
  return t.to(autocast_dtype_for(op, t.dtype()));
}

}  // namespace dp
