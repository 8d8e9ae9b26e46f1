#include "runtime/nn/conv2d.h"

#include "runtime/nn/init.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"

namespace dp::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Device device, Generator& gen,
               const Conv2dOptions& options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  const Conv2dOptions& o = options;
  DP_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && o.stride > 0 && o.padding >= 0 &&
               o.dilation > 0 && o.groups > 0,
           "Conv2d: invalid configuration in=", in_channels, " out=", out_channels, " kernel=", kernel_size,
           " stride=", o.stride, " padding=", o.padding, " dilation=", o.dilation, " groups=", o.groups);
  DP_CHECK(in_channels % o.groups == 0 && out_channels % o.groups == 0, "Conv2d: groups=", o.groups,
           " must divide in_channels=", in_channels, " and out_channels=", out_channels);
  params_.stride_h = params_.stride_w = o.stride;
  params_.pad_h = params_.pad_w = o.padding;
  params_.dilation_h = params_.dilation_w = o.dilation;
  params_.groups = o.groups;

  Tensor w = empty({out_channels, in_channels / o.groups, kernel_size, kernel_size}, o.dtype, device);
  Tensor b = o.bias ? empty({out_channels}, o.dtype, device) : Tensor();
  init::linear_default_(w, b, gen);
  weight = register_parameter("weight", w);
  if (o.bias) bias = register_parameter("bias", b);
}

Tensor Conv2d::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, in, H, W], weight [out, in/groups, k, k] → [N, out, H', W']
  DP_CHECK(x.dim() == 4 && x.size(1) == in_channels, "Conv2d(", in_channels, ", ", out_channels,
           ", kernel_size=", kernel_size, "): expected input [N, ", in_channels, ", H, W], got ", x.str());
  return conv2d(x, weight, bias, params_);
}

}  // namespace dp::nn
