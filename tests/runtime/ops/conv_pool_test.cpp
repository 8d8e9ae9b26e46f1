// conv2d and pooling: finite-difference gradients in f64, a direct-convolution reference, and
// forward/backward against PyTorch fixtures.
#include <gtest/gtest.h>

#include <sstream>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/pool.h"

namespace dp {
namespace {

using testing::compare_float32_with_float64;
using testing::Fixture;
using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

const std::string kFixtures = std::string(DPTRAIN_SOURCE_DIR) + "/tests/fixtures";

// "2,1" → {2, 1}
std::pair<int64_t, int64_t> pair_option(const std::string& text) {
  std::istringstream in(text);
  int64_t a = 0, b = 0;
  char comma = 0;
  in >> a >> comma >> b;
  return {a, b};
}

Conv2dParams conv_params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
                         int64_t groups = 1) {
  return Conv2dParams{sh, sw, ph, pw, dh, dw, groups};
}

Pool2dParams pool_params(int64_t k, int64_t s, int64_t pad) { return Pool2dParams{k, k, s, s, pad, pad, true}; }

class ConvPoolOpsTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor in(const Shape& s) { return random_input(s, gen, cpu); }
  // Distinct values (a scaled random permutation) so max pooling has no ties.
  Tensor distinct(const Shape& s) {
    std::vector<double> v(numel_of(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7919) % v.size()) / v.size();
    Tensor t = from_vector<double>(v, s, cpu);
    t.set_requires_grad(true);
    return t;
  }
};

TEST_F(ConvPoolOpsTest, Conv2dGradients) {
  struct Case { Shape x, w; bool bias; Conv2dParams p; };
  const Case cases[] = {
      {{2, 3, 5, 4}, {4, 3, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {{2, 3, 9, 8}, {4, 3, 3, 3}, false, conv_params(2, 2, 0, 0, 2, 2)},
      {{2, 4, 7, 6}, {6, 2, 3, 2}, true, conv_params(2, 1, 1, 0, 1, 1, 2)},
      {{2, 3, 4, 5}, {5, 3, 1, 1}, true, conv_params(1, 1, 0, 0)},
      // ≥ 256 output pixels: one image per chunk (the in-place paths of NOTE [ Conv chunking ])
      {{3, 2, 17, 16}, {3, 2, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {{3, 2, 16, 17}, {3, 2, 1, 1}, true, conv_params(1, 1, 0, 0)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Conv2dParams p = c.p;
    auto fn = [p](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], p); };
    // The finite-difference round-off grows with the size of the summed loss: the two large
    // cases get a looser absolute tolerance.
    const testing::GradcheckOptions tol{1e-6, numel_of(c.x) > 1000 ? 1e-6 : 1e-7, 1e-5};
    EXPECT_GRADCHECK(gradcheck(fn, {in(c.x), in(c.w), c.bias ? in({c.w[0]}) : Tensor()}, tol));
  }
  auto fn = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1, 1, 1)); };
  EXPECT_GRADCHECK(gradcheck(fn, {noncontiguous_copy(in({2, 3, 4, 4})), in({2, 3, 3, 3}), in({2})}));
}

TEST_F(ConvPoolOpsTest, Conv2dSkipsInputGradientWhenNotNeeded) {
  Tensor x = randn({2, 1, 6, 6}, gen, kFloat64, cpu);  // data: no gradient
  Tensor w = in({3, 1, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), conv_params(1, 1, 1, 1));
  ASSERT_TRUE(y.grad_fn());
  EXPECT_FALSE(y.grad_fn()->needs_input_grad(0));
  EXPECT_TRUE(y.grad_fn()->needs_input_grad(1));
}

TEST_F(ConvPoolOpsTest, Conv2dFloat32MatchesFloat64OnALargeBatch) {
  // Enough images for both threads; exercises the per-thread partial weight gradients.
  auto fn = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1, 1, 1)); };
  EXPECT_TRUE(compare_float32_with_float64(fn, {in({16, 8, 12, 12}), in({16, 8, 3, 3}), in({16})}, 2e-4).empty());
}

TEST_F(ConvPoolOpsTest, PoolingGradients) {
  auto mp = [](Pool2dParams p) { return [p](const std::vector<Tensor>& v) { return max_pool2d(v[0], p); }; };
  EXPECT_GRADCHECK(gradcheck(mp(pool_params(2, 2, 0)), {distinct({2, 3, 6, 6})}));
  EXPECT_GRADCHECK(gradcheck(mp(pool_params(3, 2, 1)), {distinct({2, 2, 7, 5})}));
  auto ap = [](const std::vector<Tensor>& v) { return avg_pool2d(v[0], pool_params(3, 2, 1)); };
  EXPECT_GRADCHECK(gradcheck(ap, {in({2, 3, 7, 6})}));
  EXPECT_GRADCHECK(gradcheck(ap, {noncontiguous_copy(in({2, 3, 6, 6}))}));
  for (auto [oh, ow] : {std::pair{1, 1}, std::pair{2, 3}, std::pair{3, 4}}) {
    auto aap = [oh = oh, ow = ow](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], oh, ow); };
    EXPECT_GRADCHECK(gradcheck(aap, {in({2, 3, 5, 7})}));
  }
}

TEST_F(ConvPoolOpsTest, Conv2dMatchesPyTorch) {
  for (const char* name : {"conv2d_basic", "conv2d_stride2_dilation2", "conv2d_groups2", "conv2d_1x1",
                           "conv2d_basic_f32", "conv2d_stride2_dilation2_f32", "conv2d_groups2_f32", "conv2d_1x1_f32"}) {
    SCOPED_TRACE(name);
    Fixture f(kFixtures, name);
    const bool f32 = std::string(name).ends_with("_f32");
    const double tol = f32 ? 1e-4 : 1e-10;
    auto [sh, sw] = pair_option(f.option("stride"));
    auto [ph, pw] = pair_option(f.option("padding"));
    auto [dh, dw] = pair_option(f.option("dilation"));
    const Conv2dParams p = conv_params(sh, sw, ph, pw, dh, dw, std::stoll(f.option("groups")));
    const bool has_bias = f.option("bias") == "true";
    Tensor x = f.tensor("x", cpu).set_requires_grad(true);
    Tensor w = f.tensor("weight", cpu).set_requires_grad(true);
    Tensor b = has_bias ? f.tensor("bias", cpu).set_requires_grad(true) : Tensor();
    Tensor y = conv2d(x, w, b, p);
    EXPECT_TENSOR_NEAR("out", y, f.tensor("out", cpu), tol);
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), tol);
    EXPECT_TENSOR_NEAR("grad_weight", w.grad(), f.tensor("grad_weight", cpu), tol);
    if (has_bias) EXPECT_TENSOR_NEAR("grad_bias", b.grad(), f.tensor("grad_bias", cpu), tol);
  }
}

TEST_F(ConvPoolOpsTest, PoolingMatchesPyTorch) {
  for (const char* name : {"max_pool2d_k2s2", "max_pool2d_k3s2p1", "avg_pool2d_k3s2p1", "adaptive_avg_pool2d_1x1",
                           "adaptive_avg_pool2d_2x3"}) {
    SCOPED_TRACE(name);
    Fixture f(kFixtures, name);
    Tensor x = f.tensor("x", cpu).set_requires_grad(true);
    Tensor expected = f.tensor("out", cpu);
    Tensor y;
    const std::string op = f.option("op");
    if (op == "adaptive_avg_pool2d") {
      y = adaptive_avg_pool2d(x, expected.size(2), expected.size(3));
    } else {
      auto [kh, kw] = pair_option(f.option("kernel_size"));
      auto [sh, sw] = pair_option(f.option("stride"));
      auto [ph, pw] = pair_option(f.option("padding"));
      const Pool2dParams p{kh, kw, sh, sw, ph, pw, true};
      y = op == "max_pool2d" ? max_pool2d(x, p) : avg_pool2d(x, p);
    }
    EXPECT_TENSOR_NEAR("out", y, expected, 1e-12);
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), 1e-12);
  }
}

TEST_F(ConvPoolOpsTest, ClearErrors) {
  Tensor x = zeros({2, 3, 5, 5}, kFloat32, cpu);
  EXPECT_ERROR_CONTAINS(conv2d(zeros({3, 5, 5}, kFloat32, cpu), zeros({4, 3, 3, 3}, kFloat32, cpu), Tensor(), {}),
                        "conv2d: expected a 4-D input");
  EXPECT_ERROR_CONTAINS(conv2d(x, zeros({4, 2, 3, 3}, kFloat32, cpu), Tensor(), {}), "expects 2 input channels");
  EXPECT_ERROR_CONTAINS(conv2d(x, zeros({4, 3, 7, 7}, kFloat32, cpu), Tensor(), {}), "is too small for kernel");
  EXPECT_ERROR_CONTAINS(conv2d(x, zeros({4, 3, 3, 3}, kFloat32, cpu), zeros({5}, kFloat32, cpu), {}),
                        "does not match 4 output channels");
  Conv2dParams g2;
  g2.groups = 2;
  EXPECT_ERROR_CONTAINS(conv2d(x, zeros({4, 1, 3, 3}, kFloat32, cpu), Tensor(), g2), "divisible by groups");
  EXPECT_ERROR_CONTAINS(max_pool2d(zeros({2, 3, 1, 1}, kFloat32, cpu), pool_params(2, 2, 0)), "smaller than the kernel");
  EXPECT_ERROR_CONTAINS(adaptive_avg_pool2d(x, 0, 1), "output size must be");
}

}  // namespace
}  // namespace dp
