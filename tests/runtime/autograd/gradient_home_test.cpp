// NOTE [ Gradient homes ] (runtime/autograd/engine.h): a leaf's gradient home receives the first
// accumulation of a backward when .grad is unset — written there by the op that computes it
// (AccumulateGrad then copies nothing) or copied there once — with the values a run without a
// home gives, bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/autograd/autocast.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/autograd/node.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/generator.h"

namespace dp {
namespace {

class GradientHomeTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{7};

  Tensor param(const Shape& shape) { return randn(shape, gen, kFloat32, cpu).set_requires_grad(true); }
  // A home in storage of its own, poisoned so that a gradient not written there shows.
  Tensor home_for(const Tensor& p) { return full(p.shape(), 12345.0, p.dtype(), cpu); }
  static int64_t home_copies(const Tensor& p) {
    return std::dynamic_pointer_cast<AccumulateGrad>(gradient_edge(p))->home_copies();
  }
  static bool same_bits(const Tensor& a, const Tensor& b) {
    const Tensor ca = a.contiguous(), cb = b.contiguous();
    return ca.nbytes() == cb.nbytes() && std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
  }

  // Runs loss() backward twice over `params`: without homes (the reference gradients), then with
  // a home for each. Checks that every .grad is its home, holds the reference bits, and that
  // `written[i]` params needed no copy (the op wrote the home) while the others took one.
  void expect_homes(std::vector<Tensor> params, const std::function<Tensor()>& loss,
                    const std::vector<bool>& written, const std::string& what) {
    for (Tensor& p : params) p.set_grad(Tensor());
    loss().backward();
    std::vector<Tensor> reference;
    for (const Tensor& p : params) reference.push_back(p.grad().clone());
    std::vector<Tensor> homes;
    std::vector<int64_t> copies_before;
    for (Tensor& p : params) {
      p.set_grad(Tensor());  // zero_grad(set_to_none)
      homes.push_back(home_for(p));
      p.set_grad_home(homes.back());
      copies_before.push_back(home_copies(p));
    }
    loss().backward();
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor& p = params[i];
      const std::string where = what + " parameter " + std::to_string(i) + " " + p.str();
      ASSERT_TRUE(p.grad().defined()) << where;
      EXPECT_EQ(p.grad().raw_data(), homes[i].raw_data()) << where << ": .grad is not its home";
      EXPECT_TRUE(same_bits(homes[i], reference[i])) << where << ": the home holds other values than a run without";
      EXPECT_EQ(home_copies(p) - copies_before[i], written[i] ? 0 : 1)
          << where << (written[i] ? ": the op should have written the home itself" : ": expected one copy");
      p.set_grad_home(Tensor());
    }
  }
};

TEST_F(GradientHomeTest, LinearWritesTheWeightsGradientTheBiasIsCopiedOnce) {
  const Tensor x = randn({6, 3}, gen, kFloat32, cpu);
  Tensor w = param({5, 3}), b = param({5});
  // The bias gradient is a sum over rows made by the reduce op: copied into its home once.
  expect_homes({w, b}, [&] { return sum(mul(linear(x, w, b), linear(x, w, b))); }, {false, false},
               "linear used twice");  // two contributions per parameter: one copy of the sum
  expect_homes({w, b}, [&] { return sum(mul(linear(x, w, b), x.narrow(1, 0, 1))); }, {true, false}, "linear");
}

TEST_F(GradientHomeTest, ConvolutionWritesWeightAndBiasGradients) {
  const Tensor x = randn({2, 3, 7, 7}, gen, kFloat32, cpu);
  Tensor w = param({4, 3, 3, 3}), b = param({4});
  Conv2dParams cp;
  cp.pad_h = cp.pad_w = 1;
  const Tensor target = randn({2, 4, 7, 7}, gen, kFloat32, cpu);
  expect_homes({w, b}, [&] { return sum(mul(conv2d(x, w, b, cp), target)); }, {true, true}, "conv2d");
  const Tensor x_cl = x.contiguous(MemoryFormat::ChannelsLast);
  expect_homes({w, b}, [&] { return sum(mul(conv2d(x_cl, w, b, cp), target)); }, {true, true},
               "conv2d channels-last");
}

TEST_F(GradientHomeTest, NormsAndEmbeddingWriteTheirParametersGradients) {
  const Tensor x = randn({4, 3, 5, 5}, gen, kFloat32, cpu);
  Tensor gamma = param({3}), beta = param({3});
  const Tensor rm = zeros({3}, kFloat32, cpu), rv = ones({3}, kFloat32, cpu);
  const Tensor target = randn({4, 3, 5, 5}, gen, kFloat32, cpu);
  expect_homes({gamma, beta}, [&] { return sum(mul(batch_norm(x, gamma, beta, rm, rv, true, 0.1, 1e-5), target)); },
               {true, true}, "batch_norm");
  expect_homes({gamma, beta},
               [&] { return sum(mul(batch_norm_add_relu(x, target, gamma, beta, rm, rv, true, 0.1, 1e-5), target)); },
               {true, true}, "batch_norm_add_relu");

  const Tensor rows = randn({6, 2, 4}, gen, kFloat32, cpu);
  Tensor ln_w = param({2, 4}), ln_b = param({2, 4});
  const Tensor ln_target = randn({6, 2, 4}, gen, kFloat32, cpu);
  expect_homes({ln_w, ln_b}, [&] { return sum(mul(layer_norm(rows, {2, 4}, ln_w, ln_b, 1e-5), ln_target)); },
               {true, true}, "layer_norm over two dims");

  Tensor table = param({10, 4});
  const Tensor ids = from_vector<int64_t>({1, 3, 3, 9, 0}, {5}, cpu);
  const Tensor e_target = randn({5, 4}, gen, kFloat32, cpu);
  expect_homes({table}, [&] { return sum(mul(embedding(ids, table), e_target)); }, {true}, "embedding");
}

// Under autocast the weight reaches the convolution as a bfloat16 cast; the cast's backward
// widens the gradient straight into the float32 home.
TEST_F(GradientHomeTest, AutocastCastWritesTheFloat32Home) {
  const Tensor x = randn({2, 3, 6, 6}, gen, kFloat32, cpu);
  Tensor w = param({4, 3, 3, 3}), b = param({4});
  const Tensor target = randn({2, 4, 4, 4}, gen, kFloat32, cpu);
  expect_homes({w, b},
               [&] {
                 AutocastGuard autocast(kBFloat16);
                 return sum(mul(conv2d(x, w, b, Conv2dParams{}).to(kFloat32), target));
               },
               {true, true}, "conv2d under bf16 autocast");
}

// With .grad set, gradients accumulate into it as before; the home is only for the first.
TEST_F(GradientHomeTest, LaterAccumulationsAddIntoTheGradient) {
  const Tensor x = randn({6, 3}, gen, kFloat32, cpu);
  Tensor w = param({5, 3});
  auto loss = [&] { return sum(mul(linear(x, w), linear(x, w).detach())); };
  loss().backward();
  const Tensor once = w.grad().clone();
  w.set_grad(Tensor());
  const Tensor home = home_for(w);
  w.set_grad_home(home);
  loss().backward();
  loss().backward();  // accumulates: .grad is set
  EXPECT_EQ(w.grad().raw_data(), home.raw_data());
  EXPECT_TRUE(same_bits(home, add(once, once)));
}

TEST_F(GradientHomeTest, AHomeMustMatchTheLeaf) {
  Tensor w = param({5, 3});
  EXPECT_THROW(w.set_grad_home(zeros({3, 5}, kFloat32, cpu)), Error);
  EXPECT_THROW(w.set_grad_home(zeros({5, 3}, kFloat64, cpu)), Error);
  EXPECT_THROW(w.set_grad_home(zeros({3, 5}, kFloat32, cpu).t()), Error);  // not contiguous
}

}  // namespace
}  // namespace dp
