// LAMB against a float64 transcription of apex FusedLAMB's equations, the golden first step of
// issue 4, global-norm clipping and the ratio edge cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/clip_grad.h"
#include "optim/lamb.h"
#include "runtime/ops/elementwise.h"
#include "optim_harness.h"

namespace dp {
namespace {

using testing::norm_of;
using testing::OptimHarness;
using testing::Values;

// N = ‖all g‖; c = N/max when N > max; ĝ = g/c; m, v moments; u = m̂/(√v̂ + ε) + λw;
// r = ‖w‖/‖u‖ where λ ≠ 0 and adapted (1 when a norm is 0); w −= lr·r·u.
struct ReferenceLamb {
  std::vector<std::vector<Values>> m, v;
  std::vector<std::vector<int>> t;
  double last_norm = 0;
  void step(OptimHarness& h, const std::vector<std::vector<Values>>& grads, const LambOptions& o) {
    if (m.empty()) {
      m.resize(2), v.resize(2), t.resize(2);
      for (size_t g = 0; g < 2; ++g) {
        t[g].assign(h.ref[g].size(), 0);
        for (const Values& p : h.ref[g]) m[g].emplace_back(p.size(), 0.0), v[g].emplace_back(p.size(), 0.0);
      }
    }
    double sq = 0;
    for (const auto& group : grads)
      for (const Values& gr : group) sq += norm_of(gr) * norm_of(gr);
    last_norm = std::sqrt(sq);
    const double c = o.max_grad_norm > 0 && last_norm > o.max_grad_norm ? last_norm / o.max_grad_norm : 1.0;
    for (size_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < h.ref[g].size(); ++i) {
        if (grads[g][i].empty()) continue;
        Values& w = h.ref[g][i];
        const double lr = h.groups[g].lr, wd = h.groups[g].weight_decay;
        const int step = ++t[g][i];
        const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
        Values u(w.size());
        for (size_t j = 0; j < w.size(); ++j) {
          const double gj = grads[g][i][j] / c;
          m[g][i][j] = h.stored(o.beta1 * m[g][i][j] + (1 - o.beta1) * gj);
          v[g][i][j] = h.stored(o.beta2 * v[g][i][j] + (1 - o.beta2) * gj * gj);
          u[j] = (m[g][i][j] / bc1) / (std::sqrt(v[g][i][j] / bc2) + o.eps) + wd * w[j];
        }
        double r = 1;
        if (h.groups[g].adapt && wd != 0) {
          const double wn = norm_of(w), un = norm_of(u);
          if (wn != 0 && un != 0) r = wn / un;
        }
        for (size_t j = 0; j < w.size(); ++j) w[j] = h.stored(w[j] - lr * r * h.stored(u[j]));
      }
  }
};

struct Case {
  DType dtype;
  double grad_scale;  // 1: global norm ≫ 1 (clipped); 1e-3: below 1 (not clipped)
};

class LambTest : public ::testing::TestWithParam<Case> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
};

TEST_P(LambTest, MatchesReferenceFor60Steps) {
  const auto [dtype, scale] = GetParam();
  const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
  const LambOptions options{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-6, .weight_decay = 0.01,
                            .max_grad_norm = 1.0};
  OptimHarness h(cpu, dtype, options.lr, options.weight_decay, 0.005);
  LAMB lamb(h.groups, options);
  ReferenceLamb ref;
  for (int step = 0; step < 60; ++step) {
    const auto grads = h.set_grads(step, scale);
    ref.step(h, grads, options);
    lamb.step();
    lamb.zero_grad();
    EXPECT_NEAR(lamb.last_grad_norm(), ref.last_norm, 1e-9 * ref.last_norm);
  }
  EXPECT_EQ(scale == 1.0, ref.last_norm > 1.0);  // the two cases exercise clipping and its absence
  h.expect_matches(tol, "LAMB");
  EXPECT_EQ(lamb.last_trust_ratios()[1][0], 1.0);  // λ = 0, excluded: plain Adam step
}

INSTANTIATE_TEST_SUITE_P(Cases, LambTest,
                         ::testing::Values(Case{kFloat64, 1.0}, Case{kFloat32, 1.0}, Case{kFloat64, 1e-3},
                                           Case{kFloat32, 1e-3}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.dtype)) +
                                  (info.param.grad_scale == 1.0 ? "_clipped" : "_unclipped");
                         });

class LambGolden : public ::testing::Test {
 protected:
  CpuBackend backend{1};
  Device cpu{&backend};
  Tensor param(std::vector<double> v) {
    return from_vector<double>(v, {static_cast<int64_t>(v.size())}, cpu).set_requires_grad(true);
  }
};

// Issue 4: w0 = [3, 4], g = [0.3, −0.4], lr 0.01, defaults.
TEST_F(LambGolden, FirstStepOfIssue4) {
  Tensor w = param({3, 4});
  LAMB lamb({w}, {.lr = 0.01});
  w.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  lamb.step();
  EXPECT_NEAR(lamb.last_trust_ratios()[0][0], 3.5511145699556397, 1e-15);
  const std::vector<double> w1 = w.to_vector<double>();
  EXPECT_NEAR(w1[0], 2.963423638299548, 1e-15);
  EXPECT_NEAR(w1[1], 4.034090611093932, 1e-15);
  EXPECT_DOUBLE_EQ(lamb.last_grad_norm(), 0.5);
}

TEST_F(LambGolden, ZeroGradientGivesRatioOneOverLambda) {
  Tensor w = param({3, 4});
  LAMB lamb({w}, {.lr = 0.01, .weight_decay = 0.02});
  w.set_grad(from_vector<double>({0, 0}, {2}, cpu));
  lamb.step();
  EXPECT_NEAR(lamb.last_trust_ratios()[0][0], 1 / 0.02, 1e-12);
  const std::vector<double> w1 = w.to_vector<double>();  // w − lr·(1/λ)·λw = w(1 − lr)
  EXPECT_NEAR(w1[0], 3 * 0.99, 1e-14);
  EXPECT_NEAR(w1[1], 4 * 0.99, 1e-14);
}

TEST_F(LambGolden, ZeroWeightsGiveRatioOne) {
  Tensor w = param({0, 0});
  LAMB lamb({w}, {.lr = 0.01});
  w.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  lamb.step();
  EXPECT_EQ(lamb.last_trust_ratios()[0][0], 1.0);
}

TEST_F(LambGolden, ExcludedParametersTakeAPlainAdamStep) {
  Tensor kept = param({3, 4}), excluded = param({3, 4});
  std::vector<ParamGroup> groups = {{{kept}, 0.01, 0.01, true}, {{excluded}, 0.01, 0.0, false}};
  LAMB lamb(groups, {.lr = 0.01});
  kept.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  excluded.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  lamb.step();
  EXPECT_EQ(lamb.last_trust_ratios()[1][0], 1.0);
  const double adam = 0.3 / (0.3 + 1e-6);  // m̂/(√v̂ + ε) on the first step
  const std::vector<double> w1 = excluded.to_vector<double>();
  EXPECT_NEAR(w1[0], 3 - 0.01 * adam, 1e-15);
  EXPECT_NEAR(w1[1], 4 + 0.01 * 0.4 / (0.4 + 1e-6), 1e-15);
  // The global norm covers both groups: √(0.25 + 0.25) < 1, no clipping.
  EXPECT_DOUBLE_EQ(lamb.last_grad_norm(), std::sqrt(0.5));
  EXPECT_NEAR(kept.to_vector<double>()[0], 2.963423638299548, 1e-15);
}

TEST_F(LambGolden, GlobalClippingDividesEveryGradient) {
  // g = 10·[0.3, −0.4] has norm 5: clipped by 5 it is [0.6, −0.8]; Adam's first step is
  // scale-free, so only the norm shows it.
  Tensor w = param({3, 4});
  LAMB lamb({w}, {.lr = 0.01, .max_grad_norm = 1.0});
  w.set_grad(from_vector<double>({3, -4}, {2}, cpu));
  lamb.step();
  EXPECT_DOUBLE_EQ(lamb.last_grad_norm(), 5.0);
  // Second step: v mixes clipped gradients; compare to an unclipped run fed g/5 directly.
  Tensor w2 = param({3, 4});
  LAMB reference({w2}, {.lr = 0.01, .max_grad_norm = 0.0});
  w2.set_grad(from_vector<double>({0.6, -0.8}, {2}, cpu));
  reference.step();
  w.set_grad(from_vector<double>({3, -4}, {2}, cpu));
  w2.set_grad(from_vector<double>({0.6, -0.8}, {2}, cpu));
  lamb.step();
  reference.step();
  const std::vector<double> a = w.to_vector<double>(), b = w2.to_vector<double>();
  EXPECT_NEAR(a[0], b[0], 1e-15);
  EXPECT_NEAR(a[1], b[1], 1e-15);
}

// LAMB's step runs on the device (N, apex's divisor and the trust ratios never reach the host);
// it is the step the host used to compute from the same kernels — global_norm on the host, the
// divisor and ratios in double there, axpby(−lr·r, u, 1, w) — bit for bit, clipped or not.
TEST(LambDeviceStep, IsTheHostComputedStepBitForBit) {
  CpuBackend backend{2};
  const Device cpu{&backend};
  for (const double max_grad_norm : {1.0, 0.0}) {
    Generator gen(3);
    std::vector<Tensor> a, b;
    for (const Shape& s : {Shape{40, 30}, Shape{30}, Shape{7, 5}}) {
      const Tensor t = randn(s, gen, kFloat32, cpu);
      a.push_back(t.clone().set_requires_grad(true));
      b.push_back(t.clone().set_requires_grad(true));
    }
    const LambOptions o{.lr = 0.02, .weight_decay = 0.01, .max_grad_norm = max_grad_norm};
    std::vector<ParamGroup> groups = {{{a[0], a[2]}, 0.02, 0.01, true}, {{a[1]}, 0.02, 0.0, false}};
    LAMB lamb(groups, o);
    std::vector<Tensor> m, v;
    for (const Tensor& p : b) m.push_back(zeros(p.shape(), kFloat32, cpu)), v.push_back(zeros(p.shape(), kFloat32, cpu));
    for (int step = 1; step <= 4; ++step) {
      std::vector<Tensor> grads;
      for (size_t k = 0; k < a.size(); ++k) grads.push_back(mul(randn(a[k].shape(), gen, kFloat32, cpu), 3.0));
      for (size_t k = 0; k < a.size(); ++k) a[k].set_grad(grads[k].clone());
      lamb.step();
      // The host-computed step (the implementation before this one).
      const double n = global_norm({grads[0], grads[2], grads[1]});  // in the groups' order, as LAMB sums
      const double divisor = max_grad_norm > 0 && n > max_grad_norm ? n / max_grad_norm : 1.0;
      for (size_t k : {0u, 2u, 1u}) {  // group order: a[0], a[2], then a[1]
        AdamParams p;
        p.lr = 0.02;
        p.weight_decay = k == 1 ? 0.0 : 0.01;
        p.step = step;
        p.eps = o.eps;
        p.grad_divisor = divisor;
        Tensor u = Tensor::empty(b[k].shape(), kFloat32, cpu);
        backend.lamb_direction(b[k].detach(), grads[k], m[k], v[k], u, p);
        double r = 1.0;
        if (k != 1) {
          const std::vector<double> sq = squared_norms({b[k].detach(), u});
          const double wn = std::sqrt(sq[0]), un = std::sqrt(sq[1]);
          if (wn != 0 && un != 0) r = wn / un;
        }
        backend.axpby(-0.02 * r, u, 1.0, b[k].detach());
      }
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_EQ(a[k].to_vector<float>(), b[k].to_vector<float>()) << "step " << step << " tensor " << k
                                                                      << " max_grad_norm " << max_grad_norm;
    }
  }
}

// A non-finite global norm skips the whole step through found_inf (weights and moments unchanged,
// step counts not advanced), as the loss scaler's verdict does.
TEST(LambDeviceStep, ANonFiniteGradientNormSkipsTheStep) {
  CpuBackend backend{1};
  const Device cpu{&backend};
  Tensor w = from_vector<double>({3, 4}, {2}, cpu).set_requires_grad(true);
  Tensor u = from_vector<double>({1, 2, 3}, {3}, cpu).set_requires_grad(true);
  LAMB lamb({w, u}, {.lr = 0.01});
  w.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  u.set_grad(from_vector<double>({0.1, std::numeric_limits<double>::infinity(), 0.2}, {3}, cpu));
  const Tensor found_inf = zeros({}, kFloat32, cpu);
  lamb.step(DeviceStep{found_inf, Tensor()});
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{3, 4}));
  EXPECT_EQ(u.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(lamb.step_count(0, 0), 0);
  EXPECT_EQ(lamb.state_buffer(0, 0, "exp_avg").to_vector<double>(), (std::vector<double>{0, 0}));
}

}  // namespace
}  // namespace dp
