#include "models/resnet.h"

#include <string>

#include "runtime/nn/init.h"
#include "runtime/ops/elementwise.h"

namespace dp {

namespace {
// torchvision's conv3x3 / conv1x1 helpers: bias-free, padding keeps the size at stride 1.
std::shared_ptr<nn::Conv2d> conv_no_bias(int64_t in, int64_t out, int64_t kernel, int64_t stride, Device device,
                                         Generator& gen) {
  return std::make_shared<nn::Conv2d>(in, out, kernel, device, gen,
                                      nn::Conv2dOptions{.stride = stride, .padding = kernel / 2, .bias = false});
}

// torchvision's _make_layer shortcut: Sequential(conv1x1(in, out, stride), BN(out)) when the
// block changes the shape, else null (identity).
std::shared_ptr<nn::Sequential> make_downsample(int64_t in, int64_t out, int64_t stride, Device device,
                                                Generator& gen) {
  if (stride == 1 && in == out) return nullptr;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      conv_no_bias(in, out, 1, stride, device, gen),
      std::make_shared<nn::BatchNorm2d>(out, device),
  });
}
}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Device device, Generator& gen) {
  conv1 = register_module("conv1", conv_no_bias(in_planes, planes, 3, stride, device, gen));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes, device));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  conv2 = register_module("conv2", conv_no_bias(planes, planes, 3, 1, device, gen));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes, device));
  if (auto shortcut = make_downsample(in_planes, planes * kExpansion, stride, device, gen))
    downsample = register_module("downsample", shortcut);
}

Tensor BasicBlock::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, in, H, W] → out [N, planes, H/s, W/s]; the shortcut matches out's shape
  // relu(bn(conv(x))) and relu(bn(conv(out)) + shortcut), each written by the batch-norm kernel
  // (BatchNorm2d::forward_add_relu; torchvision's values, the `relu` module kept for its names).
  Tensor out = bn1->forward_relu(conv1->forward(x));
  const Tensor shortcut = downsample ? downsample->forward(x) : x;
  return bn2->forward_add_relu(conv2->forward(out), shortcut);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, Device device, Generator& gen) {
  // Registration order is torchvision's (relu after bn3): it fixes the names' order.
  conv1 = register_module("conv1", conv_no_bias(in_planes, planes, 1, 1, device, gen));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(planes, device));
  conv2 = register_module("conv2", conv_no_bias(planes, planes, 3, stride, device, gen));
  bn2 = register_module("bn2", std::make_shared<nn::BatchNorm2d>(planes, device));
  conv3 = register_module("conv3", conv_no_bias(planes, planes * kExpansion, 1, 1, device, gen));
  bn3 = register_module("bn3", std::make_shared<nn::BatchNorm2d>(planes * kExpansion, device));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  if (auto shortcut = make_downsample(in_planes, planes * kExpansion, stride, device, gen))
    downsample = register_module("downsample", shortcut);
}

Tensor Bottleneck::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, in, H, W] → [N, planes, H, W] → [N, planes, H/s, W/s] → out [N, 4·planes, H/s, W/s]
  // As BasicBlock: each bn → relu and bn3 → add → relu is one batch-norm kernel.
  Tensor out = bn1->forward_relu(conv1->forward(x));
  out = bn2->forward_relu(conv2->forward(out));
  const Tensor shortcut = downsample ? downsample->forward(x) : x;
  return bn3->forward_add_relu(conv3->forward(out), shortcut);
}

ResNet::ResNet(ResNetBlock block, const std::array<int64_t, 4>& blocks_per_layer, int64_t num_classes,
               int64_t in_channels, Device device, Generator& gen, bool zero_init_residual) {
  DP_CHECK(in_channels > 0 && num_classes > 0, "resnet: in_channels and num_classes must be positive, got ",
           in_channels, " and ", num_classes);
  for (size_t l = 0; l < blocks_per_layer.size(); ++l)
    DP_CHECK(blocks_per_layer[l] > 0, "resnet: layer", l + 1, " needs at least one block, got ",
             blocks_per_layer[l]);
  const int64_t expansion = block == ResNetBlock::Bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
  conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(
                                       in_channels, 64, 7, device, gen,
                                       nn::Conv2dOptions{.stride = 2, .padding = 3, .bias = false}));
  bn1 = register_module("bn1", std::make_shared<nn::BatchNorm2d>(64, device));
  relu = register_module("relu", std::make_shared<nn::ReLU>());
  maxpool = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  int64_t in_planes = 64;
  for (size_t l = 0; l < layers.size(); ++l) {
    const int64_t planes = 64 << l, first_stride = l == 0 ? 1 : 2;
    auto layer = std::make_shared<nn::Sequential>();
    for (int64_t b = 0; b < blocks_per_layer[l]; ++b) {
      const int64_t stride = b == 0 ? first_stride : 1;
      if (block == ResNetBlock::Bottleneck)
        layer->push_back(std::make_shared<Bottleneck>(in_planes, planes, stride, device, gen));
      else
        layer->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride, device, gen));
      in_planes = planes * expansion;
    }
    layers[l] = register_module("layer" + std::to_string(l + 1), layer);
  }
  avgpool = register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(1, 1));
  fc = register_module("fc", std::make_shared<nn::Linear>(512 * expansion, num_classes, device, gen));

  // torchvision re-initialises every conv after construction; BN already starts at 1 / 0.
  for (auto& [name, module] : named_modules())
    if (auto* conv = dynamic_cast<nn::Conv2d*>(module))
      nn::init::kaiming_normal_(conv->weight, gen, 0.0, nn::init::FanMode::FanOut, nn::init::Nonlinearity::ReLU);
  // Then, with zero_init_residual, each residual branch's last BN scales it to 0, so every block
  // starts as the identity (Goyal et al., "Accurate, Large Minibatch SGD", 2017).
  if (zero_init_residual)
    for (auto& [name, module] : named_modules()) {
      if (auto* b = dynamic_cast<Bottleneck*>(module)) nn::init::zeros_(b->bn3->weight);
      if (auto* b = dynamic_cast<BasicBlock*>(module)) nn::init::zeros_(b->bn2->weight);
    }
}

Tensor ResNet::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, C, H, W] → stem [N, 64, H/4, W/4] → layer4 [N, 512·expansion, H/32, W/32]
  // → pooled [N, 512·expansion] → [N, classes]
  Tensor h = maxpool->forward(bn1->forward_relu(conv1->forward(x)));
  for (const std::shared_ptr<nn::Sequential>& layer : layers) h = layer->forward(h);
  return fc->forward(avgpool->forward(h).flatten(1));
}

std::shared_ptr<ResNet> resnet18(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual) {
  return std::make_shared<ResNet>(ResNetBlock::Basic, std::array<int64_t, 4>{2, 2, 2, 2}, num_classes, in_channels,
                                  device, gen, zero_init_residual);
}

std::shared_ptr<ResNet> resnet34(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual) {
  return std::make_shared<ResNet>(ResNetBlock::Basic, std::array<int64_t, 4>{3, 4, 6, 3}, num_classes, in_channels,
                                  device, gen, zero_init_residual);
}

std::shared_ptr<ResNet> resnet50(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                 bool zero_init_residual) {
  return std::make_shared<ResNet>(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 4, 6, 3}, num_classes,
                                  in_channels, device, gen, zero_init_residual);
}

std::shared_ptr<ResNet> resnet101(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                  bool zero_init_residual) {
  return std::make_shared<ResNet>(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 4, 23, 3}, num_classes,
                                  in_channels, device, gen, zero_init_residual);
}

std::shared_ptr<ResNet> resnet152(int64_t num_classes, int64_t in_channels, Device device, Generator& gen,
                                  bool zero_init_residual) {
  return std::make_shared<ResNet>(ResNetBlock::Bottleneck, std::array<int64_t, 4>{3, 8, 36, 3}, num_classes,
                                  in_channels, device, gen, zero_init_residual);
}

}  // namespace dp
