// Initialisers: torch's fan/gain arithmetic and the statistics of the drawn values.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/nn/init.h"
#include "runtime/nn/linear.h"
#include "runtime/ops/creation.h"

namespace dp::nn {
namespace {

struct Moments {
  double mean = 0, var = 0, min = 1e300, max = -1e300;
};

Moments moments_of(const Tensor& t) {
  const std::vector<double> v = t.to(kFloat64).to_vector<double>();
  Moments m;
  for (double x : v) {
    m.mean += x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size() - 1);
  return m;
}

class InitTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{123};
};

TEST_F(InitTest, FanAndGainFollowTorch) {
  Tensor conv_weight = empty({64, 32, 3, 3}, kFloat32, cpu);
  EXPECT_EQ(init::fan_in_and_fan_out(conv_weight), (std::pair<int64_t, int64_t>{32 * 9, 64 * 9}));
  EXPECT_EQ(init::fan_in_and_fan_out(empty({10, 784}, kFloat32, cpu)), (std::pair<int64_t, int64_t>{784, 10}));
  EXPECT_THROW(init::fan_in_and_fan_out(empty({5}, kFloat32, cpu)), Error);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
}

// Linear's default: weight and bias U(-1/√fan_in, 1/√fan_in), so variance bound²/3.
TEST_F(InitTest, LinearDefaultIsUniformOverInverseSqrtFanIn) {
  Linear fc(256, 512, cpu, gen);
  const double bound = 1.0 / 16.0;
  const Moments w = moments_of(fc.weight), b = moments_of(fc.bias);
  EXPECT_GE(w.min, -bound);
  EXPECT_LT(w.max, bound);
  EXPECT_GT(w.max, 0.99 * bound);  // fills the range
  EXPECT_LT(w.min, -0.99 * bound);
  EXPECT_NEAR(w.mean, 0.0, 0.01 * bound);            // 131072 draws: sd of the mean ≈ 0.0016·bound
  EXPECT_NEAR(w.var, bound * bound / 3.0, 0.02 * bound * bound / 3.0);
  EXPECT_GE(b.min, -bound);
  EXPECT_LT(b.max, bound);
  EXPECT_NEAR(b.var, bound * bound / 3.0, 0.2 * bound * bound / 3.0);  // 512 draws
}

// torchvision's ResNet conv init: N(0, 2/fan_out).
TEST_F(InitTest, KaimingNormalFanOutRelu) {
  Tensor w = empty({128, 64, 3, 3}, kFloat32, cpu);
  init::kaiming_normal_(w, gen, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
  const Moments m = moments_of(w);
  const double expected_var = 2.0 / (128 * 9);
  EXPECT_NEAR(m.mean, 0.0, 0.01 * std::sqrt(expected_var));
  EXPECT_NEAR(m.var, expected_var, 0.02 * expected_var);
}

TEST_F(InitTest, FillsAndDeterminism) {
  Linear fc(8, 4, cpu, gen);  // a registered parameter: in-place init must still be allowed
  init::ones_(fc.weight);
  for (float v : fc.weight.to_vector<float>()) EXPECT_EQ(v, 1.0f);
  init::zeros_(fc.bias);
  for (float v : fc.bias.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  init::constant_(fc.bias, 0.5);
  for (float v : fc.bias.to_vector<float>()) EXPECT_EQ(v, 0.5f);

  Generator g1(99), g2(99);
  Linear a(16, 8, cpu, g1), b(16, 8, cpu, g2);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
  EXPECT_NE(a.weight.to_vector<float>(), Linear(16, 8, cpu, g1).weight.to_vector<float>());  // stream advanced
}

}  // namespace
}  // namespace dp::nn
