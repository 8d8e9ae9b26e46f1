#include "runtime/backend/backend.h"

#include <string>

namespace dp {

const char* kernel_name(Kernel kernel) {
  switch (kernel) {
    case Kernel::Copy: return "copy";
    case Kernel::Fill: return "fill";
    case Kernel::Arange: return "arange";
    case Kernel::Random: return "random";
    case Kernel::Unary: return "unary";
    case Kernel::UnaryBackward: return "unary_backward";
    case Kernel::Binary: return "binary";
    case Kernel::BinaryScalar: return "binary_scalar";
    case Kernel::Axpby: return "axpby";
    case Kernel::Reduce: return "reduce";
    case Kernel::ArgmaxRows: return "argmax_rows";
    case Kernel::Gemm: return "gemm";
    case Kernel::Conv2dForward: return "conv2d_forward";
    case Kernel::Conv2dBackwardInput: return "conv2d_backward_input";
    case Kernel::Conv2dBackwardWeight: return "conv2d_backward_weight";
    case Kernel::MaxPool2dForward: return "max_pool2d_forward";
    case Kernel::MaxPool2dBackward: return "max_pool2d_backward";
    case Kernel::AvgPool2dForward: return "avg_pool2d_forward";
    case Kernel::AvgPool2dBackward: return "avg_pool2d_backward";
    case Kernel::AdaptiveAvgPool2dForward: return "adaptive_avg_pool2d_forward";
    case Kernel::AdaptiveAvgPool2dBackward: return "adaptive_avg_pool2d_backward";
    case Kernel::BatchNormForward: return "batch_norm_forward";
    case Kernel::BatchNormBackward: return "batch_norm_backward";
    case Kernel::LayerNormForward: return "layer_norm_forward";
    case Kernel::LayerNormBackward: return "layer_norm_backward";
    case Kernel::SoftmaxForward: return "softmax_forward";
    case Kernel::SoftmaxBackward: return "softmax_backward";
    case Kernel::AttentionSoftmaxForward: return "attention_softmax_forward";
    case Kernel::AttentionSoftmaxBackward: return "attention_softmax_backward";
    case Kernel::CrossEntropyForward: return "cross_entropy_forward";
    case Kernel::CrossEntropyBackward: return "cross_entropy_backward";
    case Kernel::EmbeddingForward: return "embedding_forward";
    case Kernel::EmbeddingBackward: return "embedding_backward";
    case Kernel::SgdUpdate: return "sgd_update";
    case Kernel::AdamwUpdate: return "adamw_update";
    case Kernel::LambDirection: return "lamb_direction";
    case Kernel::LambUpdate: return "lamb_update";
    case Kernel::LarsUpdate: return "lars_update";
    case Kernel::LarsTrustRatios: return "lars_trust_ratios";
    case Kernel::SquaredNorms: return "squared_norms";
    case Kernel::AmpUnscaleAndCheck: return "amp_unscale_and_check";
    case Kernel::AmpUpdateScale: return "amp_update_scale";
    case Kernel::CountSteps: return "count_steps";
    case Kernel::LrLookup: return "lr_lookup";
    case Kernel::ClipCoefficient: return "clip_coefficient";
    case Kernel::ScaleBy: return "scale_by";
    case Kernel::kCount: break;
  }
  return "?";
}

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Square: return "square";
    case UnaryOp::Reciprocal: return "reciprocal";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Silu: return "silu";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Equal: return "equal";
  }
  return "?";
}

void check_grad_prologue(const char* op, const BatchNormGradPrologue& prologue, const Tensor& dy, bool training,
                         bool need_sums) {
  DP_CHECK(!prologue.relu || training, op,
           ": the relu prologue recomputes the training forward's output; in eval mode mask the gradient with "
           "relu's own backward");
  if (!prologue.relu_output.defined()) {
    DP_CHECK(!prologue.masked_dy.defined(), op, ": masked_dy without relu_output");
    return;
  }
  DP_CHECK(!prologue.relu && training && need_sums, op,
           ": relu's mask from the forward's output is folded into the training pass that takes the sums (not "
           "with the relu prologue, in eval, or without dx, dweight or dbias); mask with relu's own backward");
  for (const Tensor* t : {&prologue.relu_output, &prologue.masked_dy})
    DP_CHECK(t->defined() && t->shape() == dy.shape() && t->dtype() == dy.dtype() && t->device() == dy.device() &&
                 t->strides() == dy.strides(),
             op, ": relu_output and masked_dy must be laid out as the gradient ", dy.str(), ", got ",
             t->defined() ? t->str() : std::string("none"));
}

void Backend::unsupported(const char* op) const {
  throw Error(detail::concat(op, ": no ", device_type() == DeviceType::CPU ? "CPU" : "CUDA",
                             " kernel (device ", Device(const_cast<Backend*>(this)).str(), ")"));
}

void Backend::sgd_update_multi(const std::vector<SgdUpdateItem>& items) {
  for (const SgdUpdateItem& it : items) sgd_update(it.param, it.grad, it.momentum_buf, it.p);
}

void Backend::adamw_update_multi(const std::vector<AdamwUpdateItem>& items) {
  for (const AdamwUpdateItem& it : items) adamw_update(it.param, it.grad, it.exp_avg, it.exp_avg_sq, it.p);
}

void Backend::lamb_direction_multi(const std::vector<LambDirectionItem>& items) {
  for (const LambDirectionItem& it : items) lamb_direction(it.param, it.grad, it.exp_avg, it.exp_avg_sq, it.update, it.p);
}

void Backend::lamb_update_multi(const std::vector<LambUpdateItem>& items) {
  for (const LambUpdateItem& it : items) lamb_update(it.param, it.update, it.p);
}

void Backend::lars_update_multi(const std::vector<LarsUpdateItem>& items) {
  for (const LarsUpdateItem& it : items) lars_update(it.param, it.grad, it.momentum_buf, it.p);
}

std::unique_ptr<DeviceGraph> capture_graph(Backend& backend, const std::function<void()>& work) {
  backend.begin_capture();
  try {
    work();
    return backend.end_capture();
  } catch (...) {
    backend.abort_capture();
    throw;
  }
}

}  // namespace dp
