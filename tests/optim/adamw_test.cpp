// AdamW against a float64 transcription of its equations (torch.optim.AdamW), 60 steps.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/adamw.h"
#include "optim_harness.h"

namespace dp {
namespace {

using testing::OptimHarness;
using testing::Values;

// p ← p(1 − lr·λ); m, v moments; p ← p − lr · m̂ / (√v̂ + ε), m̂ = m/(1 − β1^t), v̂ = v/(1 − β2^t).
struct ReferenceAdamW {
  std::vector<std::vector<Values>> m, v;
  std::vector<std::vector<int>> t;
  void step(OptimHarness& h, const std::vector<std::vector<Values>>& grads, const AdamWOptions& o) {
    if (m.empty()) {
      m.resize(2), v.resize(2), t.resize(2);
      for (size_t g = 0; g < 2; ++g) {
        t[g].assign(h.ref[g].size(), 0);
        for (const Values& p : h.ref[g]) m[g].emplace_back(p.size(), 0.0), v[g].emplace_back(p.size(), 0.0);
      }
    }
    for (size_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < h.ref[g].size(); ++i) {
        if (grads[g][i].empty()) continue;
        const double lr = h.groups[g].lr, wd = h.groups[g].weight_decay;
        const int step = ++t[g][i];
        const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
        Values& p = h.ref[g][i];
        for (size_t j = 0; j < p.size(); ++j) {
          const double gj = grads[g][i][j];
          m[g][i][j] = h.stored(o.beta1 * m[g][i][j] + (1 - o.beta1) * gj);
          v[g][i][j] = h.stored(o.beta2 * v[g][i][j] + (1 - o.beta2) * gj * gj);
          p[j] = h.stored(p[j] * (1 - lr * wd) - lr * (m[g][i][j] / bc1) / (std::sqrt(v[g][i][j] / bc2) + o.eps));
        }
      }
  }
};

class AdamWTest : public ::testing::TestWithParam<DType> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
};

TEST_P(AdamWTest, MatchesReferenceFor60Steps) {
  const DType dtype = GetParam();
  const double tol = dtype == kFloat64 ? 1e-12 : 1e-6;
  const AdamWOptions options{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05};
  OptimHarness h(cpu, dtype, options.lr, options.weight_decay, 0.003);
  const std::vector<double> frozen = h.ref[1][1];
  AdamW adamw(h.groups, options);
  ReferenceAdamW ref;
  for (int step = 0; step < 60; ++step) {
    const auto grads = h.set_grads(step);
    ref.step(h, grads, options);
    adamw.step();
    adamw.zero_grad();
  }
  h.expect_matches(tol, "AdamW");
  EXPECT_EQ(h.groups[1].params[1].to_vector<double>(), frozen);  // never had a gradient
  EXPECT_EQ(adamw.step_count(0, 0), 60);
  EXPECT_EQ(adamw.step_count(0, 2), 57);  // per-parameter counts, as torch
  EXPECT_FALSE(adamw.state_buffer(1, 1, "exp_avg").defined());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamWTest, ::testing::Values(kFloat64, kFloat32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// First step by hand: m̂ = g, v̂ = g², so p1 = p0(1 − lr·λ) − lr · g / (|g| + ε).
TEST(AdamWGolden, FirstStepIsSignStepWithDecay) {
  CpuBackend backend(1);
  Device cpu(&backend);
  Tensor w = from_vector<double>({3, 4}, {2}, cpu).set_requires_grad(true);
  AdamW adamw({w}, {.lr = 0.1, .eps = 0.0, .weight_decay = 0.1});
  w.set_grad(from_vector<double>({0.3, -0.4}, {2}, cpu));
  adamw.step();
  const std::vector<double> got = w.to_vector<double>();
  EXPECT_NEAR(got[0], 3 * 0.99 - 0.1, 1e-15);
  EXPECT_NEAR(got[1], 4 * 0.99 + 0.1, 1e-15);
}

TEST(AdamWGolden, RejectsBadOptions) {
  CpuBackend backend(1);
  Device cpu(&backend);
  Tensor w = from_vector<double>({3, 4}, {2}, cpu).set_requires_grad(true);
  EXPECT_THROW(AdamW({w}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW({w}, {.eps = -1}), Error);
}

}  // namespace
}  // namespace dp
