// SmallCNN and MLP: names, sizes, forward/backward, dropout's train/eval behaviour.
#include <gtest/gtest.h>

#include "model_test_util.h"

#include "models/mlp.h"
#include "models/small_cnn.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace dp {
namespace {

using testing::parameter_count;
using testing::parameter_names;

class SmallModelsTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{21};
};

TEST_F(SmallModelsTest, SmallCnnLayout) {
  SmallCNN model(1, 10, cpu, gen);
  EXPECT_EQ(parameter_names(model),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.3.weight", "features.3.bias",
                                      "classifier.0.weight", "classifier.0.bias", "classifier.2.weight",
                                      "classifier.2.bias"}));
  // 32·9+32 + 64·32·9+64 + 3136·128+128 + 128·10+10
  EXPECT_EQ(parameter_count(model), 320 + 18'496 + 401'536 + 1'290);
  EXPECT_TRUE(model.named_buffers().empty());
}

TEST_F(SmallModelsTest, SmallCnnForwardBackward) {
  SmallCNN model(1, 10, cpu, gen);
  Tensor logits = model.forward(randn({4, 1, 28, 28}, gen, kFloat32, cpu));
  EXPECT_EQ(logits.shape(), (Shape{4, 10}));
  cross_entropy(logits, from_vector<int64_t>({0, 1, 2, 9}, {4}, cpu)).backward();
  for (const auto& [name, p] : model.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  EXPECT_THROW(SmallCNN(1, 10, cpu, gen, 30), Error);  // not a multiple of 4
}

TEST_F(SmallModelsTest, MlpLayoutWithAndWithoutDropout) {
  MLP plain(784, {1024, 1024}, 10, 0.0, cpu, gen);
  EXPECT_EQ(parameter_names(plain), (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                                              "layers.2.bias", "layers.4.weight", "layers.4.bias"}));
  EXPECT_EQ(parameter_count(plain), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  MLP dropped(784, {64}, 10, 0.5, cpu, gen);  // Linear, ReLU, Dropout, Linear
  EXPECT_EQ(parameter_names(dropped),
            (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.3.weight", "layers.3.bias"}));
  MLP linear_only(784, {}, 10, 0.0, cpu, gen);
  EXPECT_EQ(parameter_count(linear_only), 7850);
}

TEST_F(SmallModelsTest, MlpFlattensImagesAndDropoutOnlyActsInTraining) {
  MLP model(784, {256}, 10, 0.5, cpu, gen);
  Tensor x = randn({8, 1, 28, 28}, gen, kFloat32, cpu);
  EXPECT_EQ(model.forward(x).shape(), (Shape{8, 10}));
  model.eval();
  const std::vector<float> eval_out = model.forward(x).to_vector<float>();
  EXPECT_EQ(model.forward(x).to_vector<float>(), eval_out);
  model.train();
  const std::vector<float> a = model.forward(x).to_vector<float>(), b = model.forward(x).to_vector<float>();
  EXPECT_NE(a, b);  // fresh masks each call
  EXPECT_NE(a, eval_out);
}

}  // namespace
}  // namespace dp
