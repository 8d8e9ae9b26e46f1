// SGD against a float64 transcription of torch.optim.SGD's update, plus the optimiser contract.
#include <gtest/gtest.h>

#include <cmath>

#include "optim/sgd.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace dp {
namespace {

// torch.optim.SGD's _single_tensor_sgd for one parameter, in plain doubles.
struct ReferenceSgd {
  std::vector<double> param, buf;
  void step(const std::vector<double>& grad, double lr, double wd, const SgdOptions& o) {
    std::vector<double> d(grad);
    for (size_t i = 0; i < d.size(); ++i) d[i] += wd * param[i];
    if (o.momentum != 0) {
      if (buf.empty()) {
        buf = d;
      } else {
        for (size_t i = 0; i < d.size(); ++i) buf[i] = buf[i] * o.momentum + (1 - o.dampening) * d[i];
      }
      for (size_t i = 0; i < d.size(); ++i) d[i] = o.nesterov ? d[i] + o.momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < d.size(); ++i) param[i] -= lr * d[i];
  }
};

// A gradient that depends on the current parameter and the step, so trajectories diverge on any
// mistake: g_i = cos((1 + 0.1 s) p_i) + 0.01 i.
std::vector<double> synthetic_grad(const std::vector<double>& p, int step) {
  std::vector<double> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i] = std::cos((1 + 0.1 * step) * p[i]) + 0.01 * static_cast<double>(i);
  return g;
}

class SgdTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{3};
  Tensor param(const Shape& shape) { return randn(shape, gen, kFloat64, cpu).set_requires_grad(true); }
};

TEST_F(SgdTest, MatchesTorchUpdateFor20Steps) {
  struct Case { SgdOptions options; const char* what; };
  const Case cases[] = {
      {{.lr = 0.1}, "plain"},
      {{.lr = 0.1, .weight_decay = 1e-2}, "weight decay"},
      {{.lr = 0.1, .momentum = 0.9}, "momentum"},
      {{.lr = 0.1, .momentum = 0.9, .dampening = 0.3, .weight_decay = 1e-2}, "momentum, dampening, weight decay"},
      {{.lr = 0.1, .momentum = 0.9, .nesterov = true}, "nesterov"},
      {{.lr = 0.1, .momentum = 0.8, .nesterov = true, .weight_decay = 5e-3}, "nesterov, weight decay"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    // Group 0 uses the options' lr / weight decay; group 1 its own. p1 first gets a gradient at
    // step 3 (its momentum buffer starts then); p2 never gets one and must stay put.
    Tensor p0 = param({3, 4}), p1 = param({5}), p2 = param({2});
    const std::vector<double> p2_before = p2.to_vector<double>();
    std::vector<ParamGroup> groups = {{{p0, p2}, c.options.lr, c.options.weight_decay}, {{p1}, 0.05, 0.02}};
    SGD sgd(groups, c.options);
    ReferenceSgd ref0{p0.to_vector<double>(), {}}, ref1{p1.to_vector<double>(), {}};
    for (int step = 0; step < 20; ++step) {
      p0.set_grad(from_vector(synthetic_grad(ref0.param, step), p0.shape(), cpu));
      ref0.step(synthetic_grad(ref0.param, step), c.options.lr, c.options.weight_decay, c.options);
      if (step >= 3) {
        p1.set_grad(from_vector(synthetic_grad(ref1.param, step), p1.shape(), cpu));
        ref1.step(synthetic_grad(ref1.param, step), 0.05, 0.02, c.options);
      }
      sgd.step();
      sgd.zero_grad();
    }
    for (auto [tensor, ref] : {std::pair{p0, &ref0}, std::pair{p1, &ref1}}) {
      const std::vector<double> got = tensor.to_vector<double>();
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref->param[i], 1e-12 * (1 + std::abs(ref->param[i])));
    }
    EXPECT_EQ(p2.to_vector<double>(), p2_before);
    EXPECT_FALSE(sgd.momentum_buffer(0, 1).defined());
    EXPECT_EQ(sgd.momentum_buffer(0, 0).defined(), c.options.momentum != 0);
  }
}

TEST_F(SgdTest, StepBumpsVersionAndZeroGradModes) {
  Tensor p = param({4});
  SGD sgd({p}, {.lr = 0.5});
  p.set_grad(ones({4}, kFloat64, cpu));
  const uint64_t version = p.version();
  const std::vector<double> before = p.to_vector<double>();
  sgd.step();
  EXPECT_GT(p.version(), version);  // tensors saved for backward would now be flagged stale
  for (size_t i = 0; i < before.size(); ++i) EXPECT_DOUBLE_EQ(p.to_vector<double>()[i], before[i] - 0.5);

  const Tensor grad = p.grad();
  sgd.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(p.grad().same(grad));
  EXPECT_EQ(grad.to_vector<double>(), (std::vector<double>(4, 0.0)));
  sgd.zero_grad();
  EXPECT_FALSE(p.grad().defined());
}

TEST_F(SgdTest, SetLrDrivesEveryGroup) {
  Tensor a = param({2}), b = param({2});
  SGD sgd(std::vector<ParamGroup>{{{a}, 0.1, 0.0}, {{b}, 0.2, 0.0}}, {});
  sgd.set_lr(0.03);
  for (const ParamGroup& g : sgd.param_groups()) EXPECT_EQ(g.lr, 0.03);
  EXPECT_THROW(sgd.set_lr(-1), Error);
}

TEST_F(SgdTest, RejectsInvalidConfigurations) {
  Tensor p = param({2});
  EXPECT_THROW(SGD({p}, {.momentum = 0.0, .nesterov = true}), Error);
  EXPECT_THROW(SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(SGD({p}, {.lr = -0.1}), Error);
  EXPECT_THROW(SGD({p, p}, {}), Error);                                            // duplicate
  EXPECT_THROW(SGD({zeros({2}, kFloat64, cpu)}, {}), Error);                      // no requires_grad
  EXPECT_THROW(SGD({mul(p, 2.0)}, {}), Error);                                     // not a leaf
}

}  // namespace
}  // namespace dp
