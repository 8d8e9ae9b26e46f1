// torchvision's ResNet family for ImageNet (ResNet v1.5: a Bottleneck strides in its 3×3 conv)
// in torchvision's exact layout, parameter names and initialisation (torchvision.models.resnet*),
// with a configurable number of input channels:
//
//   conv1 (7×7, stride 2, pad 3, no bias) → bn1 → relu → maxpool (3, stride 2, pad 1)
//   → layer1..layer4 (widths 64, 128, 256, 512, times the block's expansion at the output;
//     layers 2-4 start with stride 2; a block whose shape changes gets a downsample =
//     Sequential(1×1 conv with the stride, BN))
//   → avgpool (adaptive, 1×1) → flatten → fc (512·expansion → classes)
//
//   depth   block       blocks per layer   parameters (1000 classes, 3 channels)
//   18      BasicBlock  2, 2, 2, 2         11,689,512
//   34      BasicBlock  3, 4, 6, 3         21,797,672
//   50      Bottleneck  3, 4, 6, 3         25,557,032
//   101     Bottleneck  3, 4, 23, 3        44,549,160
//   152     Bottleneck  3, 8, 36, 3        60,192,808
//
// Names: conv1.weight, bn1.running_mean, layer1.0.conv3.weight, layer2.0.downsample.0.weight,
// layer2.0.downsample.1.running_var, fc.bias, ... Init: convs kaiming_normal_(fan_out, relu),
// BN weight 1 / bias 0, fc torch's Linear default; with zero_init_residual the last BN of every
// residual branch (bn3 of a Bottleneck, bn2 of a BasicBlock) starts at weight 0, so each block
// starts as the identity. ResNet-18 with 10 classes and 3 input channels has 11,181,642
// parameters. On 28×28 inputs the spatial sizes run 14 → 7 → 7 → 4 → 2 → 1; on 224×224,
// 112 → 56 → 56 → 28 → 14 → 7.
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
  static constexpr int64_t kExpansion = 1;
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

// torchvision's Bottleneck (v1.5: the stride sits in conv2, the 3×3, not in conv1):
//   out = relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut(x))
// conv1 1×1 in_planes → planes, conv2 3×3 planes → planes with the stride, conv3 1×1
// planes → 4·planes; shortcut = downsample (1×1 conv with the stride, BN) or identity.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Device device, Generator& gen);
  // x [N, in_planes, H, W] → [N, 4·planes, H/stride, W/stride]
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Conv2d> conv2;
  std::shared_ptr<nn::BatchNorm2d> bn2;
  std::shared_ptr<nn::Conv2d> conv3;
  std::shared_ptr<nn::BatchNorm2d> bn3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::Sequential> downsample;  // null when the shape is unchanged
};

enum class ResNetBlock { Basic, Bottleneck };

class ResNet : public nn::Module {
 public:
  // blocks_per_layer: {2, 2, 2, 2} with Basic for ResNet-18, {3, 4, 6, 3} with Bottleneck for
  // ResNet-50 (table above).
  ResNet(ResNetBlock block, const std::array<int64_t, 4>& blocks_per_layer, int64_t num_classes,
         int64_t in_channels, Device device, Generator& gen, bool zero_init_residual = false);
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

// torchvision.models.resnet<depth>(num_classes=..., zero_init_residual=...), with in_channels
// input channels (3 in torchvision).
std::shared_ptr<ResNet> resnet18(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual = false);
std::shared_ptr<ResNet> resnet34(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual = false);
std::shared_ptr<ResNet> resnet50(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual = false);
std::shared_ptr<ResNet> resnet101(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                  bool zero_init_residual = false);
std::shared_ptr<ResNet> resnet152(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                  bool zero_init_residual = false);

}  // namespace dp
