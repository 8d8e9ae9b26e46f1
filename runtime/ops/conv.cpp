#include "runtime/ops/conv.h"

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/node.h"

namespace dp {

namespace {

// 0 when the (dilated) kernel does not fit: the numerator would be negative.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// Validates the arguments and returns y's shape [N, Cout, OH, OW].
Shape conv2d_output_shape(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  DP_CHECK(x.dim() == 4, "conv2d: expected a 4-D input [N, C, H, W], got ", x.str());
  DP_CHECK(weight.dim() == 4, "conv2d: expected a 4-D weight [Cout, Cin/groups, KH, KW], got ", weight.str());
  check_same_device("conv2d", x, weight);
  check_floating("conv2d", x);
  DP_CHECK(x.dtype() == weight.dtype(), "conv2d: input ", x.str(), " and weight ", weight.str(),
           " have different dtypes");
  DP_CHECK(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 &&
               p.pad_h >= 0 && p.pad_w >= 0,
           "conv2d: invalid parameters (groups, strides and dilations must be ≥ 1, padding ≥ 0), got groups ",
           p.groups, ", stride ", p.stride_h, "x", p.stride_w, ", dilation ", p.dilation_h, "x", p.dilation_w,
           ", padding ", p.pad_h, "x", p.pad_w);
  const int64_t C = x.size(1), K = weight.size(0);
  DP_CHECK(C % p.groups == 0 && K % p.groups == 0, "conv2d: channels in (", C, ") and out (", K,
           ") must be divisible by groups (", p.groups, ")");
  DP_CHECK(weight.size(1) * p.groups == C, "conv2d: weight ", weight.str(), " with groups ", p.groups, " expects ",
           weight.size(1) * p.groups, " input channels, got input ", x.str());
  DP_CHECK(weight.size(2) >= 1 && weight.size(3) >= 1, "conv2d: empty kernel in weight ", weight.str());
  if (bias.defined()) {
    DP_CHECK(bias.dim() == 1 && bias.size(0) == K, "conv2d: bias ", bias.str(), " does not match ", K,
             " output channels");
    check_same_device("conv2d", x, bias);
    DP_CHECK(bias.dtype() == x.dtype(), "conv2d: bias ", bias.str(), " and input ", x.str(), " have different dtypes");
  }
  const int64_t OH = conv_out_size(x.size(2), weight.size(2), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t OW = conv_out_size(x.size(3), weight.size(3), p.stride_w, p.pad_w, p.dilation_w);
  DP_CHECK(OH >= 1 && OW >= 1, "conv2d: input ", x.str(), " is too small for kernel ", shape_str(weight.shape()),
           " with padding ", p.pad_h, "x", p.pad_w, " and dilation ", p.dilation_h, "x", p.dilation_w,
           " (output would be ", OH, "x", OW, ")");
  return {x.size(0), K, OH, OW};
}

// NOTE [ Channels-last weights under autocast ]
// cuDNN's NHWC convolutions take the filter in NHWC too ([K, KH, KW, C/g] in memory). A float32
// weight keeps PyTorch's layout (checkpoints, optimisers and DDP buckets see [K, C/g, KH, KW]
// contiguous), so a channels-last convolution on a GPU transposes it: a copy for the forward, one
// for the input gradient, and one more for the weight gradient cuDNN writes in NHWC. Under
// autocast the weight is cast every step anyway, so on a GPU with channels-last activations the
// cast writes the low-precision weight channels-last; the convolution then takes it as it is,
// cuDNN writes the weight gradient channels-last too, and the cast's backward widens it straight
// into the float32 gradient (into its home when one is offered, NOTE [ Gradient homes ]) — the
// three transposes a convolution a step are gone, folded into passes that run anyway. The CPU
// keeps contiguous weights (its paths read [K, C/g, KH, KW]; channels-last is not its default).
Tensor autocast_weight(const Tensor& w, const Tensor& x) {
  if (!w.defined()) return w;
  const DType target = autocast_dtype_for(AutocastOp::Conv2d, w.dtype());
  const bool channels_last = x.device().is_cuda() && x.suggest_memory_format() == MemoryFormat::ChannelsLast;
  if (target == w.dtype() || !channels_last) return w.to(target);
  return w.to(target, MemoryFormat::ChannelsLast);  // its gradient comes back contiguous
}

}  // namespace

// x [N, Cin, H, W], weight [Cout, Cin/groups, KH, KW], bias [Cout] → y [N, Cout, OH, OW]
// Saved for backward: x when the weight needs a gradient, the weight when x does.
Tensor conv2d(const Tensor& x_cast, const Tensor& weight_cast, const Tensor& bias_cast, const Conv2dParams& p) {
  // Under autocast the three run in the low-precision dtype (NOTE [ Autocast policy ]).
  const Tensor x_in = autocast_input(AutocastOp::Conv2d, x_cast);
  const Tensor weight_in = autocast_weight(weight_cast, x_in);  // NOTE [ Channels-last weights under autocast ]
  const Tensor bias_in = autocast_input(AutocastOp::Conv2d, bias_cast);
  const Shape y_shape = conv2d_output_shape(x_in, weight_in, bias_in, p);
  // The input's memory format is the activations' (NOTE [ Channels-last ]); weights are
  // [Cout, Cin/groups, KH, KW] contiguous, or channels-last when autocast_weight made them so.
  const MemoryFormat format = x_in.suggest_memory_format();
  // (A weight that is both, such as a 1×1 one, counts as contiguous: its gradient stays so.)
  const MemoryFormat weight_format = format == MemoryFormat::ChannelsLast && !weight_in.is_contiguous() &&
                                             weight_in.is_contiguous(MemoryFormat::ChannelsLast)
                                         ? MemoryFormat::ChannelsLast
                                         : MemoryFormat::Contiguous;
  Tensor x = x_in.detach().contiguous(format), weight = weight_in.detach().contiguous(weight_format);
  Tensor bias = bias_in.defined() ? bias_in.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device(), format);
  x.device().backend().conv2d_forward(x, weight, bias, y, p);

  if (any_requires_grad({&x_in, &weight_in, &bias_in})) {
    SavedTensor saved_x = weight_in.requires_grad() ? SavedTensor(x) : SavedTensor();
    SavedTensor saved_w = x_in.requires_grad() ? SavedTensor(weight) : SavedTensor();
    const Shape x_shape = x.shape(), w_shape = weight.shape();
    record("conv2d", y, {x_in, weight_in, bias_in},
           [saved_x, saved_w, x_shape, w_shape, p, format, weight_format](const Tensor& g, const Node& node) {
             // dy [N, Cout, OH, OW] → dx [N, Cin, H, W], dw [Cout, Cin/groups, KH, KW], db [Cout];
             // dy and dx in the forward's memory format
             Tensor dy = g.contiguous(format);
             Backend& be = dy.device().backend();
             Tensor dx, dw, db;
             // dw and db where they will live (NOTE [ Gradient homes ]), when offered.
             if (node.needs_input_grad(2)) db = node.grad_buffer(2, {w_shape[0]}, dy.dtype(), dy.device());
             if (node.needs_input_grad(0)) {  // a network's first conv skips this: its input is data
               // Into the gradient already waiting for x (a residual's) when there is one (NOTE
               // [ Summing into a pending gradient ]), else a fresh one.
               dx = node.pending_sum(0, x_shape, dy.dtype(), dy.device(), format);
               const bool accumulate = dx.defined();
               if (!accumulate) dx = Tensor::empty(x_shape, dy.dtype(), dy.device(), format);
               be.conv2d_backward_input(dy, saved_w.get("conv2d"), dx, p, accumulate);
             }
             if (node.needs_input_grad(1)) {  // the bias gradient comes fused with the weight's
               // In the weight's format: a channels-last weight's gradient comes channels-last.
               dw = node.offered_home(1, w_shape, dy.dtype(), dy.device());
               if (!dw.defined()) dw = Tensor::empty(w_shape, dy.dtype(), dy.device(), weight_format);
               be.conv2d_backward_weight(dy, saved_x.get("conv2d"), dw, db, p);
             } else if (db.defined()) {  // bias alone: sum dy over N, OH, OW
               be.reduce(ReduceOp::Sum, dy, db.reshape({1, w_shape[0], 1, 1}));
             }
             return std::vector<Tensor>{dx, dw, db};
           });
  }
  return y;
}

}  // namespace dp
