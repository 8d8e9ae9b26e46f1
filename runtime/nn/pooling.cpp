#include "runtime/nn/pooling.h"

#include "runtime/ops/pool.h"

namespace dp::nn {

namespace {
Pool2dParams square_window(const char* module, int64_t kernel_size, int64_t stride, int64_t padding,
                           bool count_include_pad) {
  if (stride == 0) stride = kernel_size;
  DP_CHECK(kernel_size > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel_size, module,
           ": invalid kernel_size=", kernel_size, " stride=", stride, " padding=", padding,
           " (padding may be at most half the kernel)");
  Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel_size;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = padding;
  p.count_include_pad = count_include_pad;
  return p;
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : params(square_window("MaxPool2d", kernel_size, stride, padding, true)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  const auto range = forward_range();
  return max_pool2d(x, params);
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool count_include_pad)
    : params(square_window("AvgPool2d", kernel_size, stride, padding, count_include_pad)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  const auto range = forward_range();
  return avg_pool2d(x, params);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t output_h, int64_t output_w) : output_h(output_h), output_w(output_w) {
  DP_CHECK(output_h > 0 && output_w > 0, "AdaptiveAvgPool2d: output size must be positive, got ", output_h, "x",
           output_w);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  const auto range = forward_range();
  return adaptive_avg_pool2d(x, output_h, output_w);
}

}  // namespace dp::nn
