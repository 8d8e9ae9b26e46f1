// LARS against a float64 transcription of the MLPerf reference equations (and the lr-outside
// variant), the golden first step of issue 4, and the trust-ratio edge cases.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/lars.h"
#include "optim_harness.h"

namespace dp {
namespace {

using testing::norm_of;
using testing::OptimHarness;
using testing::Values;

// trust = η‖w‖/(‖g‖ + λ‖w‖ + ε) (1 when a norm is 0 or the group is excluded);
// inside:  buf = μ·buf − lr·trust·(g + λw); w += buf.   outside: buf = μ·buf + trust·(g + λw); w −= lr·buf.
struct ReferenceLars {
  std::vector<std::vector<Values>> buf;
  void step(OptimHarness& h, const std::vector<std::vector<Values>>& grads, const std::vector<double>& lrs,
            const LarsOptions& o) {
    if (buf.empty()) {
      buf.resize(2);
      for (size_t g = 0; g < 2; ++g)
        for (const Values& p : h.ref[g]) buf[g].emplace_back(p.size(), 0.0);
    }
    for (size_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < h.ref[g].size(); ++i) {
        if (grads[g][i].empty()) continue;
        Values& w = h.ref[g][i];
        const double wd = h.groups[g].weight_decay, lr = lrs[g];
        const double wn = norm_of(w), gn = norm_of(grads[g][i]);
        const double trust =
            !h.groups[g].adapt || wn == 0 || gn == 0 ? 1.0 : o.eta * wn / (gn + wd * wn + o.eps);
        for (size_t j = 0; j < w.size(); ++j) {
          const double d = grads[g][i][j] + wd * w[j];
          double& b = buf[g][i][j];
          if (o.lr_outside_momentum) {
            b = h.stored(o.momentum * b + trust * d);
            w[j] = h.stored(w[j] - lr * b);
          } else {
            b = h.stored(o.momentum * b - lr * trust * d);
            w[j] = h.stored(w[j] + b);
          }
        }
      }
  }
};

struct Case {
  DType dtype;
  bool lr_outside;
};

class LarsTest : public ::testing::TestWithParam<Case> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
};

TEST_P(LarsTest, MatchesReferenceFor60StepsWithChangingLr) {
  const auto [dtype, lr_outside] = GetParam();
  const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
  const LarsOptions options{.lr = 2.0, .momentum = 0.9, .weight_decay = 5e-3, .eta = 0.002, .eps = 1e-9,
                            .lr_outside_momentum = lr_outside};
  OptimHarness h(cpu, dtype, options.lr, options.weight_decay, options.lr);
  h.groups[1].lr_scale = 0.01;  // a per-group lr under one schedule (trust 1 there)
  LARS lars(h.groups, options);
  ReferenceLars ref;
  for (int step = 0; step < 60; ++step) {
    const double lr = 2.0 * (1.0 - step / 80.0);  // a decaying schedule: the two forms differ
    lars.set_lr(lr);
    const auto grads = h.set_grads(step);
    ref.step(h, grads, {lr, lr * 0.01}, options);
    lars.step();
    lars.zero_grad();
  }
  h.expect_matches(tol, lr_outside ? "LARS, lr outside" : "LARS");
  EXPECT_EQ(lars.last_trust_ratios()[1][0], 1.0);  // excluded: no adaptation
  EXPECT_TRUE(std::isnan(lars.last_trust_ratios()[1][1]));  // never had a gradient
}

INSTANTIATE_TEST_SUITE_P(Forms, LarsTest,
                         ::testing::Values(Case{kFloat64, false}, Case{kFloat32, false}, Case{kFloat64, true},
                                           Case{kFloat32, true}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype)) +
                                  (info.param.lr_outside ? "_lr_outside" : "_lr_inside");
                         });

class LarsGolden : public ::testing::Test {
 protected:
  CpuBackend backend{1};
  Device cpu{&backend};
  Tensor param(std::vector<double> v) {
    return from_vector<double>(v, {static_cast<int64_t>(v.size())}, cpu).set_requires_grad(true);
  }
};

// Issue 4: w0 = [3, 4], g = [0.3, −0.4], lr 10, λ 1e-4, η 1e-3, ε 0, μ 0.9.
TEST_F(LarsGolden, FirstStepOfIssue4) {
  Tensor w = param({3, 4});
  LARS lars({w}, {.lr = 10, .momentum = 0.9, .weight_decay = 1e-4, .eta = 1e-3, .eps = 0});
  w.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  lars.step();
  EXPECT_DOUBLE_EQ(lars.last_trust_ratios()[0][0], 0.009990009990009992);
  EXPECT_DOUBLE_EQ(LARS::trust_ratio(5, 0.5, 1e-4, 1e-3, 0), 0.009990009990009992);
  const std::vector<double> w1 = w.to_vector<double>();
  EXPECT_NEAR(w1[0], 2.97, 1e-15);
  EXPECT_NEAR(w1[1], 4.03992007992008, 1e-14);
}

TEST_F(LarsGolden, ZeroWeightsOrZeroGradientsGiveTrustOne) {
  Tensor zero_w = param({0, 0}), zero_g = param({3, 4});
  LARS lars({zero_w, zero_g}, {.lr = 0.5, .momentum = 0.9, .weight_decay = 0.1, .eta = 1e-3});
  zero_w.set_grad(from_vector<double>({1, 2}, {2}, cpu));
  zero_g.set_grad(from_vector<double>({0, 0}, {2}, cpu));
  lars.step();
  EXPECT_EQ(lars.last_trust_ratios()[0][0], 1.0);
  EXPECT_EQ(lars.last_trust_ratios()[0][1], 1.0);
  EXPECT_EQ(zero_w.to_vector<double>(), (std::vector<double>{-0.5, -1.0}));  // w − lr·g
  const std::vector<double> decayed = zero_g.to_vector<double>();        // w − lr·λ·w
  EXPECT_NEAR(decayed[0], 3 * (1 - 0.05), 1e-15);
  EXPECT_NEAR(decayed[1], 4 * (1 - 0.05), 1e-15);
}

TEST_F(LarsGolden, ExcludedParametersGetNeitherDecayNorAdaptation) {
  Tensor kept = param({3, 4}), excluded = param({3, 4});
  std::vector<ParamGroup> groups = {{{kept}, 10, 1e-4, true}, {{excluded}, 10, 0.0, false}};
  LARS lars(groups, {.lr = 10, .momentum = 0.9, .weight_decay = 1e-4, .eta = 1e-3});
  kept.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  excluded.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  lars.step();
  EXPECT_EQ(lars.last_trust_ratios()[1][0], 1.0);
  const std::vector<double> w1 = excluded.to_vector<double>();
  EXPECT_NEAR(w1[0], 3 - 10 * 0.3, 1e-15);
  EXPECT_NEAR(w1[1], 4 + 10 * 0.4, 1e-15);
  EXPECT_NEAR(kept.to_vector<double>()[0], 2.97, 1e-15);
}

TEST_F(LarsGolden, RejectsBadOptions) {
  Tensor w = param({3, 4});
  EXPECT_THROW(LARS({w}, {.eta = 0}), Error);
  EXPECT_THROW(LARS({w}, {.momentum = -1}), Error);
}

}  // namespace
}  // namespace dp
