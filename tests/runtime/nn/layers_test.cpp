// Layers whose ops need no pending kernel: Linear, activations, Flatten, Sequential.
#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/nn/activation.h"
#include "runtime/nn/flatten.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/sequential.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"

namespace dp::nn {
namespace {

using testing::gradcheck;
using testing::random_input;

class LayersTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{5};
};

TEST_F(LayersTest, LinearComputesXWtPlusBias) {
  Linear fc(3, 2, cpu, gen, /*with_bias=*/true, kFloat64);
  Tensor x = from_vector<double>({1, 2, 3, -1, 0, 4}, {2, 3}, cpu);
  const std::vector<double> w = fc.weight.to_vector<double>(), b = fc.bias.to_vector<double>();
  const std::vector<double> xs = x.to_vector<double>(), y = fc.forward(x).to_vector<double>();
  ASSERT_EQ(y.size(), 4u);
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 2; ++o) {
      double expected = b[o];
      for (int i = 0; i < 3; ++i) expected += xs[n * 3 + i] * w[o * 3 + i];
      EXPECT_NEAR(y[n * 2 + o], expected, 1e-12);
    }
  EXPECT_EQ(fc.forward(ones({4, 5, 3}, kFloat64, cpu)).shape(), (Shape{4, 5, 2}));
}

TEST_F(LayersTest, LinearGradientsMatchFiniteDifferences) {
  Linear fc(4, 3, cpu, gen, true, kFloat64);
  // Checks d/dx, d/dweight, d/dbias through the module's own parameters.
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); },
                             {random_input({5, 4}, gen, cpu), fc.weight, fc.bias}));
  fc.zero_grad();  // gradcheck leaves its own gradients behind
  Tensor x = random_input({5, 4}, gen, cpu);
  fc.forward(x).backward(ones({5, 3}, kFloat64, cpu));
  EXPECT_EQ(fc.weight.grad().shape(), (Shape{3, 4}));
  EXPECT_EQ(fc.bias.grad().to_vector<double>(), (std::vector<double>{5, 5, 5}));  // Σ over the batch of 1
}

TEST_F(LayersTest, ActivationModulesMatchTheirOps) {
  Tensor x = random_input({3, 4}, gen, cpu, -2, 2);
  struct Case { std::shared_ptr<Module> module; Tensor (*op)(const Tensor&); };
  const Case cases[] = {{std::make_shared<ReLU>(), relu}, {std::make_shared<GELU>(), gelu},
                        {std::make_shared<Tanh>(), tanh}, {std::make_shared<Sigmoid>(), sigmoid},
                        {std::make_shared<SiLU>(), silu}};
  for (const Case& c : cases) EXPECT_EQ(c.module->forward(x).to_vector<double>(), c.op(x).to_vector<double>());
  EXPECT_TRUE(ReLU().named_parameters().empty());
}

TEST_F(LayersTest, FlattenKeepsTheBatchDim) {
  Tensor x = zeros({2, 3, 4, 5}, kFloat32, cpu);
  EXPECT_EQ(Flatten().forward(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(Flatten(2).forward(x).shape(), (Shape{2, 3, 20}));
  EXPECT_EQ(Flatten(0, 1).forward(x).shape(), (Shape{6, 4, 5}));
}

TEST_F(LayersTest, SequentialChainsInOrderAndNamesByIndex) {
  Sequential seq;
  seq.push_back(std::make_shared<Linear>(4, 8, cpu, gen, true, kFloat64));
  seq.push_back(std::make_shared<Tanh>());
  seq.push_back(std::make_shared<Linear>(8, 2, cpu, gen, true, kFloat64));
  ASSERT_EQ(seq.size(), 3u);
  Tensor x = random_input({3, 4}, gen, cpu);
  const Tensor expected = seq[2]->forward(seq[1]->forward(seq[0]->forward(x)));
  EXPECT_EQ(seq.forward(x).to_vector<double>(), expected.to_vector<double>());
  std::vector<std::string> names;
  for (const auto& [name, t] : seq.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
}

}  // namespace
}  // namespace dp::nn
