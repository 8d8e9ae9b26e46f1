// 2-D convolution layer, as torch.nn.Conv2d (square kernels, NCHW).
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  DType dtype = kFloat32;
};

class Conv2d : public Module {
 public:
  // Parameters "weight" [out, in/groups, k, k] and "bias" [out] (when options.bias), torch's
  // default init (kaiming_uniform_(a=√5), bias U(±1/√fan_in)).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Device device, Generator& gen,
         const Conv2dOptions& options = {});
  // x [N, in, H, W] → [N, out, H', W']
  Tensor forward(const Tensor& x) override;

  const int64_t in_channels, out_channels, kernel_size;
  const Conv2dOptions options;
  Tensor weight, bias;  // bias undefined when built without

 private:
  Conv2dParams params_;
};

}  // namespace dp::nn
