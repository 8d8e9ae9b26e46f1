// ResNet-18 in torchvision's exact layout, parameter names and initialisation
// (torchvision.models.resnet18), with a configurable number of input channels:
//
//   conv1 (7×7, stride 2, pad 3, no bias) → bn1 → relu → maxpool (3, stride 2, pad 1)
//   → layer1..layer4 (2 BasicBlocks each; widths 64, 128, 256, 512; layers 2-4 start with
//     stride 2 and a downsample = Sequential(1×1 conv, BN))
//   → avgpool (adaptive, 1×1) → flatten → fc
//
// Names: conv1.weight, bn1.running_mean, layer1.0.conv1.weight, layer2.0.downsample.0.weight,
// layer2.0.downsample.1.running_var, fc.bias, ... Init: convs kaiming_normal_(fan_out, relu),
// BN weight 1 / bias 0, fc torch's Linear default. With 10 classes and 3 input channels it has
// 11,181,642 parameters, like torchvision's. On 28×28 inputs the spatial sizes run
// 14 → 7 → 7 → 4 → 2 → 1.
#pragma once

#include <array>
#include <memory>

#include "runtime/nn/activation.h"
#include "runtime/nn/batchnorm.h"
#include "runtime/nn/conv2d.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/pooling.h"
#include "runtime/nn/sequential.h"
#include "runtime/tensor/generator.h"

namespace dp {

// out = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), shortcut = downsample or identity.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Device device, Generator& gen);
  // x [N, in_planes, H, W] → [N, planes, H/stride, W/stride]
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Conv2d> conv2;
  std::shared_ptr<nn::BatchNorm2d> bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shape is unchanged
};

class ResNet : public nn::Module {
 public:
  // blocks_per_layer: {2, 2, 2, 2} for ResNet-18.
  ResNet(const std::array<int64_t, 4>& blocks_per_layer, int64_t num_classes, int64_t in_channels, Device device,
         Generator& gen);
  // x [N, in_channels, H, W] → logits [N, classes]
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> maxpool;
  std::array<std::shared_ptr<nn::Sequential>, 4> layers;  // registered as layer1..layer4
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes, int64_t in_channels, Device device, Generator& gen);

}  // namespace dp
