// ResNet-18: torchvision's names, parameter count, initialisation; forward/backward on 28×28.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model_test_util.h"

#include "models/resnet.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace dp {
namespace {

using testing::parameter_count;
using testing::parameter_names;

class ResNetTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
};

// torchvision.models.resnet18(num_classes=10): 11,181,642 parameters in 62 tensors, 60 buffers.
TEST_F(ResNetTest, ParameterCountMatchesTorchvision) {
  EXPECT_EQ(parameter_count(*resnet18(10, 3, cpu, gen)), 11'181'642);
  // One input channel drops 64·2·7·7 weights of conv1.
  auto gray = resnet18(10, 1, cpu, gen);
  EXPECT_EQ(parameter_count(*gray), 11'181'642 - 64 * 2 * 49);
  EXPECT_EQ(gray->named_parameters().size(), 62u);
  EXPECT_EQ(gray->named_buffers().size(), 60u);
  EXPECT_EQ(parameter_count(*resnet18(1000, 3, cpu, gen)), 11'689'512);  // the ImageNet model
}

TEST_F(ResNetTest, NamesFollowTorchvision) {
  auto model = resnet18(10, 1, cpu, gen);
  const std::vector<std::string> names = parameter_names(*model);
  const std::vector<std::string> head(names.begin(), names.begin() + 12);
  EXPECT_EQ(head, (std::vector<std::string>{
                      "conv1.weight", "bn1.weight", "bn1.bias",
                      "layer1.0.conv1.weight", "layer1.0.bn1.weight", "layer1.0.bn1.bias",
                      "layer1.0.conv2.weight", "layer1.0.bn2.weight", "layer1.0.bn2.bias",
                      "layer1.1.conv1.weight", "layer1.1.bn1.weight", "layer1.1.bn1.bias"}));
  const std::vector<std::string> layer2_block0(names.begin() + 15, names.begin() + 24);
  EXPECT_EQ(layer2_block0, (std::vector<std::string>{
                               "layer2.0.conv1.weight", "layer2.0.bn1.weight", "layer2.0.bn1.bias",
                               "layer2.0.conv2.weight", "layer2.0.bn2.weight", "layer2.0.bn2.bias",
                               "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight",
                               "layer2.0.downsample.1.bias"}));
  EXPECT_EQ(names[names.size() - 2], "fc.weight");
  EXPECT_EQ(names.back(), "fc.bias");

  std::vector<std::string> buffers;
  for (const auto& [name, t] : model->named_buffers()) buffers.push_back(name);
  EXPECT_EQ(std::vector<std::string>(buffers.begin(), buffers.begin() + 4),
            (std::vector<std::string>{"bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                                      "layer1.0.bn1.running_mean"}));
  EXPECT_NE(std::find(buffers.begin(), buffers.end(), "layer4.0.downsample.1.running_var"), buffers.end());
  EXPECT_EQ(model->named_buffers()[2].second.dtype(), kInt64);
}

TEST_F(ResNetTest, InitialisationFollowsTorchvision) {
  auto model = resnet18(10, 1, cpu, gen);
  for (const auto& [name, p] : model->named_parameters()) {
    const std::vector<double> v = p.to(kFloat64).to_vector<double>();
    if (name.find("conv") != std::string::npos || name.find("downsample.0") != std::string::npos) {
      // kaiming_normal_(fan_out, relu): std √(2 / (out · k²))
      double sq = 0;
      for (double x : v) sq += x * x;
      const double expected_std = std::sqrt(2.0 / static_cast<double>(p.size(0) * p.size(2) * p.size(3)));
      EXPECT_NEAR(std::sqrt(sq / static_cast<double>(v.size())), expected_std, 0.1 * expected_std) << name;
    } else if (name.find("bn") != std::string::npos || name.find("downsample.1") != std::string::npos) {
      const double expected = name.ends_with("weight") ? 1.0 : 0.0;
      for (double x : v) ASSERT_EQ(x, expected) << name;
    } else {  // fc: Linear's default U(±1/√512)
      for (double x : v) ASSERT_LT(std::abs(x), 1.0 / std::sqrt(512.0)) << name;
    }
  }
}

TEST_F(ResNetTest, ForwardBackwardOnFashionMnistShapes) {
  auto model = resnet18(10, 1, cpu, gen);
  Tensor x = randn({2, 1, 28, 28}, gen, kFloat32, cpu);
  Tensor logits = model->forward(x);
  EXPECT_EQ(logits.shape(), (Shape{2, 10}));
  cross_entropy(logits, from_vector<int64_t>({3, 7}, {2}, cpu)).backward();
  for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  // Training mode counted the batch and moved the running statistics off their init.
  EXPECT_EQ(model->bn1->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_NE(model->bn1->running_mean.to_vector<float>(), std::vector<float>(64, 0.0f));

  model->eval();
  const std::vector<float> running = model->bn1->running_mean.to_vector<float>();
  const std::vector<float> first = model->forward(x).to_vector<float>();
  EXPECT_EQ(model->forward(x).to_vector<float>(), first);  // eval is deterministic...
  EXPECT_EQ(model->bn1->running_mean.to_vector<float>(), running);  // ...and leaves the stats alone
  EXPECT_EQ(model->bn1->num_batches_tracked.item<int64_t>(), 1);
}

}  // namespace
}  // namespace dp
