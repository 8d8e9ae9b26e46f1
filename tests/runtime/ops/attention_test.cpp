// attention_softmax (NOTE [ Attention softmax ]) against the composed ops it replaces, and its
// contract: dtypes, masks, errors. Gradients and every backend: the op harness's rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/tensor/generator.h"
#include "runtime/autograd/autocast.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

using testing::random_input;

class AttentionSoftmaxTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{5};
  Tensor in(const Shape& s, double lo = -3, double hi = 3, DType dtype = kFloat64) {
    return random_input(s, gen, cpu, lo, hi).to(dtype).detach();  // requires_grad set where wanted
  }
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> y = b.to(kFloat64).contiguous().to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

TEST_F(AttentionSoftmaxTest, EqualsTheComposedOpsForwardAndBackward) {
  for (const Shape& mask_shape : {Shape{2, 1, 1, 9}, Shape{2, 1, 5, 9}, Shape{1, 1, 1, 9}}) {
    Tensor scores = in({2, 3, 5, 9});
    scores.set_requires_grad(true);
    // The mask is float32 inside the kernel: draw it there so both forms add the same values.
    const Tensor mask = in(mask_shape, -6, 0, kFloat32).to(kFloat64);
    const Tensor upstream = in({2, 3, 5, 9});
    const double scale = 0.3;
    const Tensor fused = attention_softmax(scores, mask, scale);
    sum(mul(fused, upstream)).backward();
    const Tensor fused_grad = scores.grad();
    scores.set_grad(Tensor());
    const Tensor composed = softmax(add(mul(scores, scale), mask), -1);
    sum(mul(composed, upstream)).backward();
    EXPECT_LT(max_abs_diff(fused, composed), 1e-14) << mask_shape.size();
    EXPECT_LT(max_abs_diff(fused_grad, scores.grad()), 1e-14);
  }
}

TEST_F(AttentionSoftmaxTest, KeepsTheScoresDtypeAndComputesInFloat32) {
  const Tensor scores = in({1, 2, 3, 40});
  const Tensor mask = in({1, 1, 1, 40}, -5, 0, kFloat32);
  const Tensor reference = attention_softmax(scores, mask, 0.125);  // float64
  for (DType dtype : {kBFloat16, kFloat16, kFloat32}) {
    const Tensor rounded = scores.to(dtype);
    const Tensor y = attention_softmax(rounded, mask, 0.125);
    EXPECT_EQ(y.dtype(), dtype);
    // Against float64 on the same rounded scores: only the output's own rounding remains.
    const Tensor exact = attention_softmax(rounded.to(kFloat64), mask, 0.125);
    const double ulp = dtype == kBFloat16 ? std::ldexp(1.0, -8) : dtype == kFloat16 ? std::ldexp(1.0, -11) : 1e-7;
    EXPECT_LE(max_abs_diff(y, exact), ulp) << dtype_name(dtype);
    EXPECT_LT(max_abs_diff(y, reference), 0.05) << dtype_name(dtype);
  }
}

TEST_F(AttentionSoftmaxTest, UnderAutocastItStaysInTheLowDtype) {
  const Tensor scores = in({1, 1, 2, 8}, -3, 3, kBFloat16);
  const AutocastGuard autocast(kBFloat16);
  EXPECT_EQ(attention_softmax(scores, Tensor(), 1.0).dtype(), kBFloat16);
}

TEST_F(AttentionSoftmaxTest, AFullyMaskedRowIsUniformAndFinite) {
  const Tensor scores = in({1, 1, 2, 4}, -3, 3, kFloat32);
  // Query 0 sees every key; query 1 none (a padding row of a packed batch).
  const float lowest = std::numeric_limits<float>::lowest();
  const Tensor mask = from_vector<float>({0, 0, 0, 0, lowest, lowest, lowest, lowest}, {1, 1, 2, 4}, cpu);
  const std::vector<float> y = attention_softmax(scores, mask, 10.0).to_vector<float>();
  for (int j = 4; j < 8; ++j) EXPECT_FLOAT_EQ(y[j], 0.25f);
  float row0 = 0;
  for (int j = 0; j < 4; ++j) row0 += y[j];
  EXPECT_NEAR(row0, 1.0f, 1e-6f);
}

TEST_F(AttentionSoftmaxTest, BadShapesAndAMaskWithGradientAreErrors) {
  const Tensor scores = in({2, 3, 4, 5});
  EXPECT_ERROR_CONTAINS(attention_softmax(in({3, 4, 5}), Tensor(), 1.0),
                        "expected scores [batch, heads, queries, keys]");
  EXPECT_ERROR_CONTAINS(attention_softmax(scores, in({2, 3, 1, 5}), 1.0), "the mask must be [2 or 1, 1, 1 or 4, 5]");
  EXPECT_ERROR_CONTAINS(attention_softmax(scores, in({2, 1, 1, 4}), 1.0), "the mask must be");
  Tensor trainable_mask = in({2, 1, 1, 5});
  trainable_mask.set_requires_grad(true);
  EXPECT_ERROR_CONTAINS(attention_softmax(scores, trainable_mask, 1.0), "the mask gets no gradient");
}

}  // namespace
}  // namespace dp
