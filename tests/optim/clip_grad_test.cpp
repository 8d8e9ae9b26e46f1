// Gradient norms and clipping by global norm (torch.nn.utils.clip_grad_norm_), float32 and float64.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/clip_grad.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

class ClipGradTest : public ::testing::TestWithParam<DType> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  // Three parameters with gradients (one above the parallel grain) and one without.
  std::vector<Tensor> params(double grad_scale) {
    std::vector<Tensor> ps;
    for (Shape s : {Shape{3, 4}, Shape{300, 200}, Shape{7}, Shape{2}}) {
      Tensor p = randn(s, gen, GetParam(), cpu).set_requires_grad(true);
      if (s != Shape{2}) p.set_grad(randn(s, gen, GetParam(), cpu, 0.0, grad_scale));
      ps.push_back(p);
    }
    return ps;
  }
  static double reference_norm(const std::vector<Tensor>& ps) {
    double s = 0;
    for (const Tensor& p : ps)
      if (p.grad().defined())
        for (double g : p.grad().to_vector<double>()) s += g * g;
    return std::sqrt(s);
  }
};

TEST_P(ClipGradTest, ScalesAboveTheMaximumOnly) {
  const double tol = GetParam() == kFloat64 ? 1e-12 : 1e-6;
  std::vector<Tensor> ps = params(1.0);
  const double norm = reference_norm(ps);  // ≈ √60019 ≈ 245
  EXPECT_NEAR(grad_norm(ps), norm, 1e-12 * norm);
  std::vector<std::vector<double>> before;
  for (const Tensor& p : ps) before.push_back(p.grad().defined() ? p.grad().to_vector<double>() : std::vector<double>{});

  EXPECT_NEAR(clip_grad_norm_(ps, 1e6), norm, 1e-12 * norm);  // above the norm: untouched
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(ps[k].grad().to_vector<double>(), before[k]);

  EXPECT_NEAR(clip_grad_norm_(ps, 2.0), norm, 1e-12 * norm);  // returns the norm before clipping
  const double coef = 2.0 / (norm + 1e-6);
  for (size_t k = 0; k < 3; ++k) {
    const std::vector<double> after = ps[k].grad().to_vector<double>();
    for (size_t j = 0; j < after.size(); ++j) EXPECT_NEAR(after[j], before[k][j] * coef, tol * std::abs(before[k][j]) + 1e-300);
  }
  EXPECT_NEAR(reference_norm(ps), 2.0 * norm / (norm + 1e-6), 10 * tol);
  EXPECT_FALSE(ps[3].grad().defined());
}

TEST_P(ClipGradTest, NonFiniteNormLeavesGradientsAlone) {
  std::vector<Tensor> ps = params(1.0);
  std::vector<double> g = ps[0].grad().to_vector<double>();
  g[5] = std::numeric_limits<double>::infinity();
  ps[0].set_grad(from_vector(g, ps[0].shape(), cpu).to(GetParam()));
  const std::vector<double> other = ps[1].grad().to_vector<double>();
  EXPECT_TRUE(std::isinf(clip_grad_norm_(ps, 1.0)));
  EXPECT_EQ(ps[1].grad().to_vector<double>(), other);
  EXPECT_THROW(clip_grad_norm_(ps, 0.0), Error);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ClipGradTest, ::testing::Values(kFloat64, kFloat32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dp
