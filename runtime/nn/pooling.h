// Pooling modules over NCHW (torch.nn.MaxPool2d, AvgPool2d, AdaptiveAvgPool2d); square windows.
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/nn/module.h"

namespace dp::nn {

class MaxPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size (torch's default).
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  // x [N, C, H, W] → [N, C, H', W']
  Tensor forward(const Tensor& x) override;

  const Pool2dParams params;
};

class AvgPool2d : public Module {
 public:
  // stride 0 means stride = kernel_size (torch's default).
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool count_include_pad = true);
  // x [N, C, H, W] → [N, C, H', W']
  Tensor forward(const Tensor& x) override;

  const Pool2dParams params;
};

class AdaptiveAvgPool2d : public Module {
 public:
  AdaptiveAvgPool2d(int64_t output_h, int64_t output_w);
  // x [N, C, H, W] → [N, C, output_h, output_w]
  Tensor forward(const Tensor& x) override;

  const int64_t output_h, output_w;
};

}  // namespace dp::nn
