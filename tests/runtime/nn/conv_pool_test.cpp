// Conv2d and the pooling modules: torch's registration and init, and forward against a direct
// float64 reference (the ops' own kernels are checked against PyTorch fixtures elsewhere).
#include <gtest/gtest.h>

#include <cmath>

#include "nn_test_util.h"

#include "common/gradcheck.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/nn/conv2d.h"
#include "runtime/nn/pooling.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/reduce.h"

namespace dp::nn {
namespace {

class ConvPoolModuleTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{31};
};

TEST_F(ConvPoolModuleTest, Conv2dRegistrationAndDefaultInit) {
  Conv2d conv(8, 16, 3, cpu, gen, {.groups = 2});
  EXPECT_EQ(names_of(conv.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight.shape(), (Shape{16, 4, 3, 3}));
  const double bound = 1.0 / std::sqrt(4.0 * 9.0);  // fan_in = in/groups · k²
  for (float v : conv.weight.to_vector<float>()) ASSERT_LT(std::abs(v), bound);
  for (float v : conv.bias.to_vector<float>()) ASSERT_LT(std::abs(v), bound);
  EXPECT_EQ(Conv2d(3, 4, 1, cpu, gen, {.bias = false}).named_parameters().size(), 1u);
  EXPECT_THROW(Conv2d(3, 4, 3, cpu, gen, {.groups = 2}), Error);  // 3 channels do not split in 2
}

// y[n, o, i, j] = b[o] + Σ_c,ki,kj x[n, c, i·s + ki − p, j·s + kj − p] · w[o, c, ki, kj]
TEST_F(ConvPoolModuleTest, Conv2dForwardMatchesDirectSum) {
  Conv2d conv(2, 3, 3, cpu, gen, {.stride = 2, .padding = 1, .dtype = kFloat64});
  Tensor x = randn({2, 2, 5, 5}, gen, kFloat64, cpu);
  Tensor y = conv.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 3}));
  const std::vector<double> xs = x.to_vector<double>(), w = conv.weight.to_vector<double>(),
                            b = conv.bias.to_vector<double>(), ys = y.to_vector<double>();
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 3; ++o)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j) {
          double acc = b[o];
          for (int c = 0; c < 2; ++c)
            for (int ki = 0; ki < 3; ++ki)
              for (int kj = 0; kj < 3; ++kj) {
                const int r = i * 2 + ki - 1, q = j * 2 + kj - 1;
                if (r >= 0 && r < 5 && q >= 0 && q < 5) acc += xs[((n * 2 + c) * 5 + r) * 5 + q] * w[((o * 2 + c) * 3 + ki) * 3 + kj];
              }
          EXPECT_NEAR(ys[((n * 3 + o) * 3 + i) * 3 + j], acc, 1e-12);
        }
  EXPECT_THROW(conv.forward(zeros({1, 3, 5, 5}, kFloat64, cpu)), Error);
}

TEST_F(ConvPoolModuleTest, Conv2dGradientsReachTheModuleParameters) {
  Conv2d conv(2, 2, 3, cpu, gen, {.padding = 1, .dtype = kFloat64});
  EXPECT_GRADCHECK(testing::gradcheck([&](const std::vector<Tensor>& v) { return conv.forward(v[0]); },
                                      {testing::random_input({1, 2, 4, 4}, gen, cpu), conv.weight, conv.bias}));
}

TEST_F(ConvPoolModuleTest, PoolingModules) {
  Tensor x = arange(0, 32, 1, kFloat64, cpu).view({1, 2, 4, 4});
  EXPECT_EQ(MaxPool2d(2).forward(x).to_vector<double>(),
            (std::vector<double>{5, 7, 13, 15, 21, 23, 29, 31}));
  EXPECT_EQ(AvgPool2d(2).forward(x).to_vector<double>(),
            (std::vector<double>{2.5, 4.5, 10.5, 12.5, 18.5, 20.5, 26.5, 28.5}));
  EXPECT_EQ(MaxPool2d(3, 2, 1).forward(zeros({1, 1, 28, 28}, kFloat32, cpu)).shape(), (Shape{1, 1, 14, 14}));
  EXPECT_EQ(AdaptiveAvgPool2d(1, 1).forward(x).to_vector<double>(), (std::vector<double>{7.5, 23.5}));
  EXPECT_THROW(MaxPool2d(2, 2, 2), Error);  // padding above half the kernel
  EXPECT_TRUE(MaxPool2d(2).named_parameters().empty());
}

}  // namespace
}  // namespace dp::nn
