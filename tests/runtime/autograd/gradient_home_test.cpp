// NOTE [ Gradient homes ] (runtime/autograd/engine.h): a leaf's gradient home receives the first
// accumulation of a backward when .grad is unset — written there by the op that computes it
// (AccumulateGrad then copies nothing) or copied there once — with the values a run without a
// home gives, bit for bit. The same on a GPU (GradientHomeCudaTest), where the kernels that write
// the homes are the CUDA backend's.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "models/resnet.h"
#include "runtime/autograd/autocast.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/autograd/node.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/loss.h"
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
  Device dev = cpu;  // where the parameters and inputs live: cuda:0 in GradientHomeCudaTest
  double tol = 0;    // 0: the home holds the bits of a run without homes; else within tol·(1 + |x|)
  Generator gen{7};

  Tensor param(const Shape& shape) { return randn(shape, gen, kFloat32, dev).set_requires_grad(true); }
  // A home in storage of its own, poisoned so that a gradient not written there shows.
  Tensor home_for(const Tensor& p) { return full(p.shape(), 12345.0, p.dtype(), p.device()); }
  static int64_t home_copies(const Tensor& p) {
    return std::dynamic_pointer_cast<AccumulateGrad>(gradient_edge(p))->home_copies();
  }
  // a and b (on any device) hold the same bits when tolerance is 0, else agree within
  // tolerance·(1 + |b|) element by element.
  bool same_values(const Tensor& a, const Tensor& b, double tolerance) const {
    const Tensor ca = a.to(cpu).contiguous(), cb = b.to(cpu).contiguous();
    if (ca.nbytes() != cb.nbytes()) return false;
    if (tolerance == 0) return std::memcmp(ca.raw_data(), cb.raw_data(), ca.nbytes()) == 0;
    const std::vector<double> va = ca.to(kFloat64).to_vector<double>(), vb = cb.to(kFloat64).to_vector<double>();
    for (size_t i = 0; i < va.size(); ++i)
      if (!(std::abs(va[i] - vb[i]) <= tolerance * (1 + std::abs(vb[i])))) return false;
    return true;
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
      EXPECT_TRUE(same_values(homes[i], reference[i], tol))
          << where << ": the home holds other values than a run without";
      EXPECT_EQ(home_copies(p) - copies_before[i], written[i] ? 0 : 1)
          << where << (written[i] ? ": the op should have written the home itself" : ": expected one copy");
      p.set_grad_home(Tensor());
    }
  }

  void linear_case();
  void convolution_case();
  void norms_and_embedding_case();
  void autocast_case();
  void later_accumulation_case();
  void resnet_step_case(bool autocast, double tolerance);
};

// On cuda:0 (skips without a GPU): the CUDA kernels write the homes; values within 1e-5 of a run
// without homes (cuDNN may pick another algorithm for the second run of a problem: same maths,
// another summation order).
class GradientHomeCudaTest : public GradientHomeTest {
 protected:
  void SetUp() override {
    if (Runtime::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA GPU is visible (no driver or no device); this test needs one";
    dev = runtime_.cuda(0);
    tol = 1e-5;
  }
  Runtime runtime_;
};

void GradientHomeTest::linear_case() {
  const Tensor x = randn({6, 3}, gen, kFloat32, dev);
  Tensor w = param({5, 3}), b = param({5});
  // The bias gradient is a sum over rows made by the reduce op: copied into its home once.
  expect_homes({w, b}, [&] { return sum(mul(linear(x, w, b), linear(x, w, b))); }, {false, false},
               "linear used twice");  // two contributions per parameter: one copy of the sum
  expect_homes({w, b}, [&] { return sum(mul(linear(x, w, b), x.narrow(1, 0, 1))); }, {true, false}, "linear");
}

void GradientHomeTest::convolution_case() {
  const Tensor x = randn({2, 3, 7, 7}, gen, kFloat32, dev);
  Tensor w = param({4, 3, 3, 3}), b = param({4});
  Conv2dParams cp;
  cp.pad_h = cp.pad_w = 1;
  const Tensor target = randn({2, 4, 7, 7}, gen, kFloat32, dev);
  expect_homes({w, b}, [&] { return sum(mul(conv2d(x, w, b, cp), target)); }, {true, true}, "conv2d");
  const Tensor x_cl = x.contiguous(MemoryFormat::ChannelsLast);
  expect_homes({w, b}, [&] { return sum(mul(conv2d(x_cl, w, b, cp), target)); }, {true, true},
               "conv2d channels-last");
}

void GradientHomeTest::norms_and_embedding_case() {
  const Tensor x = randn({4, 3, 5, 5}, gen, kFloat32, dev);
  Tensor gamma = param({3}), beta = param({3});
  const Tensor rm = zeros({3}, kFloat32, dev), rv = ones({3}, kFloat32, dev);
  const Tensor target = randn({4, 3, 5, 5}, gen, kFloat32, dev);
  expect_homes({gamma, beta}, [&] { return sum(mul(batch_norm(x, gamma, beta, rm, rv, true, 0.1, 1e-5), target)); },
               {true, true}, "batch_norm");
  expect_homes({gamma, beta},
               [&] { return sum(mul(batch_norm_add_relu(x, target, gamma, beta, rm, rv, true, 0.1, 1e-5), target)); },
               {true, true}, "batch_norm_add_relu");

  const Tensor rows = randn({6, 2, 4}, gen, kFloat32, dev);
  Tensor ln_w = param({2, 4}), ln_b = param({2, 4});
  const Tensor ln_target = randn({6, 2, 4}, gen, kFloat32, dev);
  expect_homes({ln_w, ln_b}, [&] { return sum(mul(layer_norm(rows, {2, 4}, ln_w, ln_b, 1e-5), ln_target)); },
               {true, true}, "layer_norm over two dims");

  Tensor table = param({10, 4});
  const Tensor ids = from_vector<int64_t>({1, 3, 3, 9, 0}, {5}, cpu).to(dev);
  const Tensor e_target = randn({5, 4}, gen, kFloat32, dev);
  expect_homes({table}, [&] { return sum(mul(embedding(ids, table), e_target)); }, {true}, "embedding");
}

void GradientHomeTest::autocast_case() {
  const Tensor x = randn({2, 3, 6, 6}, gen, kFloat32, dev);
  Tensor w = param({4, 3, 3, 3}), b = param({4});
  const Tensor target = randn({2, 4, 4, 4}, gen, kFloat32, dev);
  expect_homes({w, b},
               [&] {
                 AutocastGuard autocast(kBFloat16);
                 return sum(mul(conv2d(x, w, b, Conv2dParams{}).to(kFloat32), target));
               },
               {true, true}, "conv2d under bf16 autocast");
}

void GradientHomeTest::later_accumulation_case() {
  const Tensor x = randn({6, 3}, gen, kFloat32, dev);
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
  EXPECT_TRUE(same_values(home, add(once, once), tol));
}

TEST_F(GradientHomeTest, LinearWritesTheWeightsGradientTheBiasIsCopiedOnce) { linear_case(); }
TEST_F(GradientHomeTest, ConvolutionWritesWeightAndBiasGradients) { convolution_case(); }
TEST_F(GradientHomeTest, NormsAndEmbeddingWriteTheirParametersGradients) { norms_and_embedding_case(); }
// Under autocast the weight reaches the convolution as a bfloat16 cast; the cast's backward
// widens the gradient straight into the float32 home.
TEST_F(GradientHomeTest, AutocastCastWritesTheFloat32Home) { autocast_case(); }
// With .grad set, gradients accumulate into it as before; the home is only for the first.
TEST_F(GradientHomeTest, LaterAccumulationsAddIntoTheGradient) { later_accumulation_case(); }

TEST_F(GradientHomeCudaTest, LinearWritesTheWeightsGradientTheBiasIsCopiedOnce) { linear_case(); }
TEST_F(GradientHomeCudaTest, ConvolutionWritesWeightAndBiasGradients) { convolution_case(); }
TEST_F(GradientHomeCudaTest, NormsAndEmbeddingWriteTheirParametersGradients) { norms_and_embedding_case(); }
TEST_F(GradientHomeCudaTest, AutocastCastWritesTheFloat32Home) { autocast_case(); }
TEST_F(GradientHomeCudaTest, LaterAccumulationsAddIntoTheGradient) { later_accumulation_case(); }

// NOTE [ Gradient homes ] (runtime/autograd/engine.h), as DDP sets them: in a ResNet-18 step,
// channels-last, every gradient but fc.bias (a reduction's result, copied) is written into its
// home by the kernel that computes it, with the values of a step without homes (bit for bit when
// tolerance is 0, else within tolerance·(1 + |g|)). `autocast`: the forward under bf16 autocast, whose
// parameter casts widen their gradients into the float32 homes (fc.bias's too: no copy at all).
void GradientHomeTest::resnet_step_case(bool autocast, double tolerance) {
  const std::string mode = autocast ? "bf16 autocast, " : "float32, ";
  Generator resnet_gen{11};
  auto model = resnet18(10, 1, dev, resnet_gen);
  const Tensor x = randn({4, 1, 28, 28}, resnet_gen, kFloat32, dev).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = from_vector<int64_t>({3, 7, 0, 9}, {4}, dev);  // host data copied to dev
  const auto step = [&] {
    std::optional<AutocastGuard> amp;
    if (autocast) amp.emplace(kBFloat16);
    const Tensor logits = model->forward(x).to(kFloat32);
    amp.reset();
    cross_entropy(logits, y).backward();
  };
  step();
  std::vector<Tensor> reference, homes;
  std::vector<int64_t> copies_before;
  for (auto& [name, p] : model->named_parameters()) {
    reference.push_back(p.grad().clone());
    p.set_grad(Tensor());
    homes.push_back(zeros(p.shape(), p.dtype(), dev));
    p.set_grad_home(homes.back());
    copies_before.push_back(home_copies(p));
  }
  step();
  size_t i = 0;
  for (auto& [name, p] : model->named_parameters()) {
    const int64_t copies = home_copies(p) - copies_before[i];
    EXPECT_EQ(copies, name == "fc.bias" && !autocast ? 1 : 0) << mode << name;
    EXPECT_EQ(p.grad().raw_data(), homes[i].raw_data()) << mode << name;
    // The same kernels on the same inputs (BatchNorm's running statistics moved, which a
    // training-mode step does not read).
    EXPECT_TRUE(same_values(p.grad(), reference[i], tolerance)) << mode << name;
    p.set_grad_home(Tensor());
    ++i;
  }
}

TEST_F(GradientHomeTest, AResNetStepWritesEveryGradientButFcBiasIntoItsHome) {
  resnet_step_case(/*autocast=*/false, /*tolerance=*/0);
}

// The same on a GPU: cuDNN, cuBLASLt and the CUDA kernels write the homes. Tolerances: cuDNN may
// take another algorithm (another summation order) on the second step, and under bf16 autocast
// one bf16 rounding that lands the other way travels back through the layers.
TEST_F(GradientHomeCudaTest, AResNetStepWritesEveryGradientButFcBiasIntoItsHome) {
  resnet_step_case(/*autocast=*/false, /*tolerance=*/1e-4);
  resnet_step_case(/*autocast=*/true, /*tolerance=*/2e-2);
}

TEST_F(GradientHomeTest, AHomeMustMatchTheLeaf) {
  Tensor w = param({5, 3});
  EXPECT_THROW(w.set_grad_home(zeros({3, 5}, kFloat32, cpu)), Error);
  EXPECT_THROW(w.set_grad_home(zeros({5, 3}, kFloat64, cpu)), Error);
  EXPECT_THROW(w.set_grad_home(zeros({3, 5}, kFloat32, cpu).t()), Error);  // not contiguous
}

}  // namespace
}  // namespace dp
