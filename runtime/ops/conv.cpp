#include "runtime/ops/conv.h"

#include "runtime/autograd/node.h"

namespace dp {

namespace {

// 0 when the (dilated) kernel does not fit: the numerator would be negative.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

}  // namespace

// x [N, Cin, H, W], weight [Cout, Cin/groups, KH, KW], bias [Cout] → [N, Cout, OH, OW]
Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias, const Conv2dParams& p) {
  DP_CHECK(x_in.dim() == 4, "conv2d: expected a 4-D input [N, C, H, W], got ", x_in.str());
  DP_CHECK(weight_in.dim() == 4, "conv2d: expected a 4-D weight [Cout, Cin/groups, KH, KW], got ", weight_in.str());
  check_same_device("conv2d", x_in, weight_in);
  check_floating("conv2d", x_in);
  DP_CHECK(x_in.dtype() == weight_in.dtype(), "conv2d: input ", x_in.str(), " and weight ", weight_in.str(),
           " have different dtypes");
  DP_CHECK(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 &&
               p.pad_h >= 0 && p.pad_w >= 0,
           "conv2d: invalid parameters (groups, strides and dilations must be ≥ 1, padding ≥ 0)");
  const int64_t N = x_in.size(0), C = x_in.size(1), K = weight_in.size(0);
  DP_CHECK(C % p.groups == 0 && K % p.groups == 0, "conv2d: channels in (", C, ") and out (", K,
           ") must be divisible by groups (", p.groups, ")");
  DP_CHECK(weight_in.size(1) * p.groups == C, "conv2d: weight ", weight_in.str(), " expects ",
           weight_in.size(1) * p.groups, " input channels, got input ", x_in.str());
  const int64_t OH = conv_out_size(x_in.size(2), weight_in.size(2), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t OW = conv_out_size(x_in.size(3), weight_in.size(3), p.stride_w, p.pad_w, p.dilation_w);
  DP_CHECK(OH >= 1 && OW >= 1, "conv2d: input ", x_in.str(), " is too small for kernel ",
           shape_str(weight_in.shape()), " (output would be ", OH, "x", OW, ")");
  if (bias.defined())
    DP_CHECK(bias.dim() == 1 && bias.size(0) == K, "conv2d: bias ", bias.str(), " does not match ", K, " output channels");

  Tensor x = x_in.detach().contiguous(), weight = weight_in.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty({N, K, OH, OW}, x.dtype(), x.device());
  Backend& be = x.device().backend();
  be.conv2d_forward(x, weight, b, y, p);

  if (any_requires_grad({&x_in, &weight_in, &bias})) {
    SavedTensor sx = weight_in.requires_grad() || bias.requires_grad() ? SavedTensor(x) : SavedTensor();
    SavedTensor sw = x_in.requires_grad() ? SavedTensor(weight) : SavedTensor();
    const Shape x_shape = x.shape(), w_shape = weight.shape();
    record("conv2d", y, {x_in, weight_in, bias}, [sx, sw, x_shape, w_shape, p](const Tensor& g, const Node& n) {
      Tensor dy = g.contiguous();
      Backend& be = dy.device().backend();
      Tensor dx, dw, db;
      if (n.needs_input_grad(0)) {
        dx = Tensor::empty(x_shape, dy.dtype(), dy.device());
        be.conv2d_backward_input(dy, sw.get("conv2d"), dx, p);
      }
      if (n.needs_input_grad(1) || n.needs_input_grad(2)) {
        dw = Tensor::empty(w_shape, dy.dtype(), dy.device());
        if (n.needs_input_grad(2)) db = Tensor::empty({w_shape[0]}, dy.dtype(), dy.device());
        be.conv2d_backward_weight(dy, sx.get("conv2d"), dw, db, p);
      }
      return std::vector<Tensor>{dx, n.needs_input_grad(1) ? dw : Tensor(), db};
    });
  }
  return y;
}

}  // namespace dp
