// GradScaler (optim/grad_scaler.h) and the CPU loss-scaling kernels: the scale sequence PyTorch's
// GradScaler gives for a sequence of good and overflowing steps (expected values written from
// its semantics), growth that would overflow float32, exact unscaling, the skipped step leaving
// weights and optimiser state bit-identical, and the contract (once per step, state dict).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/grad_scaler.h"
#include "optim/sgd.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class GradScalerTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};

  Tensor param(const std::vector<float>& values) {
    return from_vector(values, {static_cast<int64_t>(values.size())}, cpu).set_requires_grad(true);
  }
  static void set_grad(Tensor& p, const std::vector<float>& g) {
    p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}, p.device()));
  }
  static std::vector<float> grad_of(const Tensor& p) { return p.grad().to_vector<float>(); }
  static bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  }
};

// One step of the usual loop on a one-parameter SGD model whose gradient is `g`.
struct Step {
  bool overflow;
  double scale_after;
  int64_t tracker_after;
};

TEST_F(GradScalerTest, ScaleSequenceIsPyTorchs) {
  // growth_interval 3, so growth shows within a few steps; S starts at 2^16.
  GradScalerOptions o;
  o.growth_interval = 3;
  GradScaler scaler(cpu, o);
  Tensor w = param({1.0f, 2.0f});
  SGD sgd({w}, SgdOptions{.lr = 0.1});
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  const Step steps[] = {
      {false, 65536, 1},  {false, 65536, 2}, {false, 131072, 0},  // three good steps: ×2
      {false, 131072, 1}, {true, 65536, 0},                       // an overflow: ×0.5, count restarts
      {true, 32768, 0},   {false, 32768, 1}, {false, 32768, 2},
      {true, 16384, 0},   {false, 16384, 1}, {false, 16384, 2}, {false, 32768, 0},
  };
  int k = 0;
  for (const Step& s : steps) {
    set_grad(w, {s.overflow ? kInf : 1.0f, 2.0f});
    scaler.unscale({w});
    EXPECT_EQ(scaler.found_inf().item<float>(), s.overflow ? 1.0f : 0.0f) << "step " << k;
    scaler.step(sgd);
    EXPECT_EQ(scaler.step_skipped(), s.overflow) << "step " << k;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), s.scale_after) << "step " << k;
    EXPECT_EQ(scaler.growth_tracker(), s.tracker_after) << "step " << k;
    EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f) << "update() clears the verdict";
    ++k;
  }
}

TEST_F(GradScalerTest, GrowthPastFloat32MaxKeepsTheScaleFinite) {
  GradScalerOptions o;
  o.init_scale = std::ldexp(1.0, 127);
  o.growth_interval = 1;
  GradScaler scaler(cpu, o);
  Tensor w = param({1.0f});
  SGD sgd({w}, SgdOptions{.lr = 0.1});
  for (int i = 0; i < 3; ++i) {
    set_grad(w, {1.0f});
    scaler.step(sgd);
    EXPECT_FALSE(scaler.step_skipped());
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 127)) << "2^128 is inf in float32: the scale stays";
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
  // A growth factor that lands exactly on float32's largest value is taken.
  GradScalerOptions near_max;
  near_max.init_scale = std::numeric_limits<float>::max() / 2;
  near_max.growth_interval = 1;
  GradScaler scaler2(cpu, near_max);
  set_grad(w, {1.0f});
  scaler2.step(sgd);
  scaler2.update();
  EXPECT_EQ(scaler2.get_scale(), static_cast<double>(std::numeric_limits<float>::max()));
}

TEST_F(GradScalerTest, UnscaleMultipliesByTheFloat32ReciprocalAndNotesInfAndNaN) {
  GradScalerOptions o;
  o.init_scale = 3.0;  // 1/3 is inexact: the reciprocal's rounding is visible
  GradScaler scaler(cpu, o);
  const float inv = static_cast<float>(1.0 / 3.0);
  Tensor a = param({1.0f, -7.5f, 1e-30f, 3.0f, 0.0f});
  set_grad(a, {1.0f, -7.5f, 1e-30f, 3.0f, 0.0f});
  Tensor b = from_vector(std::vector<double>{1.0, 6.0}, {2}, cpu).set_requires_grad(true);
  b.set_grad(from_vector(std::vector<double>{1.0, 6.0}, {2}, cpu));
  Tensor no_grad = param({4.0f});
  scaler.unscale({a, b, no_grad});
  const std::vector<float> expected_a = {1.0f * inv, -7.5f * inv, 1e-30f * inv, 3.0f * inv, 0.0f};
  EXPECT_TRUE(same_bits(grad_of(a), expected_a));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{static_cast<double>(inv), 6.0 * static_cast<double>(inv)}));
  EXPECT_FALSE(no_grad.grad().defined());
  EXPECT_EQ(scaler.found_inf().item<float>(), 0.0f);

  for (float bad : {kInf, -kInf, kNaN}) {
    GradScaler s(cpu, o);
    Tensor x = param({1.0f, 2.0f, 3.0f});
    Tensor y = param({6.0f});
    set_grad(x, {3.0f, bad, 6.0f});
    set_grad(y, {6.0f});
    s.unscale({x, y});
    EXPECT_EQ(s.found_inf().item<float>(), 1.0f) << bad;
    // As PyTorch: the finite values are unscaled all the same.
    EXPECT_EQ(grad_of(x)[0], 3.0f * inv);
    EXPECT_EQ(grad_of(y)[0], 6.0f * inv);
  }
}

TEST_F(GradScalerTest, TheKernelNeverClearsTheVerdictSoCallsAccumulate) {
  Tensor found = scalar_tensor(0, kFloat32, cpu);
  Tensor scale = scalar_tensor(2, kFloat32, cpu);
  Tensor bad = from_vector(std::vector<float>{kNaN}, {1}, cpu);
  Tensor good = from_vector(std::vector<float>{4.0f}, {1}, cpu);
  backend.amp_unscale_and_check({bad}, found, scale);
  backend.amp_unscale_and_check({good}, found, scale);
  EXPECT_EQ(found.item<float>(), 1.0f);
  EXPECT_EQ(good.item<float>(), 2.0f);
  backend.amp_unscale_and_check({}, found, scale);  // nothing to do is fine
  EXPECT_THROW(backend.amp_unscale_and_check({good}, found, scalar_tensor(2, kFloat64, cpu)), Error);
  EXPECT_THROW(backend.amp_update_scale(scale, scalar_tensor(0, kInt64, cpu), found, 2, 0.5, 10), Error);
  EXPECT_THROW(backend.amp_update_scale(scale, scalar_tensor(0, kInt32, cpu), found, 2, 0.5, 0), Error);
}

// Gradients of a scaled loss, unscaled, are those of the unscaled loss (S a power of two: exact).
TEST_F(GradScalerTest, ScaledBackwardThenUnscaleGivesTheUnscaledGradients) {
  Tensor w = param({0.5f, -1.25f, 3.0f});
  Tensor x = from_vector(std::vector<float>{2.0f, 4.0f, -1.0f}, {3}, cpu);
  sum(mul(mul(w, x), w)).backward();
  const std::vector<float> reference = grad_of(w);
  w.set_grad(Tensor());
  GradScaler scaler(cpu);
  const Tensor loss = sum(mul(mul(w, x), w));
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), loss.item<float>() * 65536.0f);
  scaled.backward();
  EXPECT_EQ(grad_of(w)[0], reference[0] * 65536.0f);
  scaler.unscale({w});
  EXPECT_TRUE(same_bits(grad_of(w), reference));
}

// A skipped step changes nothing the optimiser owns: weights, moments and step counts stay
// bit-identical; the next good step continues as if the bad one never happened.
TEST_F(GradScalerTest, AnOverflowSkipsTheStepLeavingWeightsAndStateBitIdentical) {
  auto run = [&](bool with_overflow) {
    Tensor w = param({0.25f, -0.5f, 1.0f, 2.0f});
    AdamW adamw({w}, AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    GradScalerOptions o;
    o.growth_interval = 2;
    GradScaler scaler(cpu, o);
    std::vector<std::vector<float>> snapshots;
    const std::vector<std::vector<float>> grads = {{1, 2, 3, 4}, {-1, 0.5f, 2, -3}, {kNaN, 1, 1, 1}, {0.5f, 0.5f, -2, 1}};
    for (size_t i = 0; i < grads.size(); ++i) {
      if (i == 2 && !with_overflow) continue;
      std::vector<float> g = grads[i];
      for (float& v : g) v *= static_cast<float>(scaler.get_scale());
      set_grad(w, g);
      const std::vector<float> before = w.to_vector<float>();
      const auto state_before = adamw.state_dict();
      std::vector<std::vector<float>> buffers_before;
      for (const auto& [name, t] : state_before)
        if (t.dtype() == kFloat32) buffers_before.push_back(t.clone().to_vector<float>());
      scaler.step(adamw);
      const bool stepped = !scaler.step_skipped();
      EXPECT_EQ(stepped, i != 2);
      if (!stepped) {
        EXPECT_TRUE(same_bits(w.to_vector<float>(), before));
        size_t k = 0;
        for (const auto& [name, t] : adamw.state_dict()) {
          if (t.dtype() == kFloat32) {
            EXPECT_TRUE(same_bits(t.to_vector<float>(), buffers_before[k++])) << name;
          }
        }
        EXPECT_EQ(adamw.step_count(0, 0), 2);
      }
      scaler.update();
      adamw.zero_grad();
    }
    EXPECT_EQ(adamw.step_count(0, 0), 3);
    return w.to_vector<float>();
  };
  // The overflow also backs the scale off, but the gradients are unscaled exactly (powers of
  // two), so the trajectory is the one without the bad step.
  EXPECT_TRUE(same_bits(run(true), run(false)));
}

TEST_F(GradScalerTest, DisabledScalerIsTheIdentity) {
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(cpu, o);
  Tensor w = param({1.0f});
  const Tensor loss = mul(w, 3.0);
  EXPECT_EQ(scaler.scale(loss).item<float>(), 3.0f);
  set_grad(w, {kInf});
  scaler.unscale({w});
  scaler.unscale({w});  // no once-per-step rule when off
  EXPECT_EQ(grad_of(w)[0], kInf);
  SGD sgd({w}, SgdOptions{.lr = 0.1});
  set_grad(w, {1.0f});
  scaler.step(sgd);
  EXPECT_FALSE(scaler.step_skipped());
  EXPECT_FLOAT_EQ(w.item<float>(), 0.9f);
}

TEST_F(GradScalerTest, UnscaleTwiceInOneStepIsAnError) {
  GradScaler scaler(cpu);
  Tensor w = param({1.0f});
  set_grad(w, {1.0f});
  scaler.unscale({w});
  try {
    scaler.unscale({w});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("already called since the last update()"));
  }
  scaler.update();
  set_grad(w, {1.0f});
  EXPECT_NO_THROW(scaler.unscale({w}));
}

TEST_F(GradScalerTest, StateDictRoundTripsAndLoadingChecksIt) {
  GradScalerOptions o;
  o.growth_interval = 5;
  GradScaler a(cpu, o);
  Tensor w = param({1.0f});
  SGD sgd({w}, SgdOptions{.lr = 0.1});
  for (float g : {1.0f, kInf, 1.0f, 1.0f}) {
    set_grad(w, {g});
    a.step(sgd);
    a.update();
  }
  EXPECT_EQ(a.get_scale(), 32768.0);
  EXPECT_EQ(a.growth_tracker(), 2);
  GradScaler b(cpu, o);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 32768.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  auto error_of = [&](std::vector<std::pair<std::string, Tensor>> state) {
    try {
      b.load_state_dict(state);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor tracker = scalar_tensor(1, kInt32, cpu);
  EXPECT_THAT(error_of({{"scale", scalar_tensor(kInf, kFloat32, cpu)}, {"growth_tracker", tracker}}),
              ::testing::HasSubstr("'scale' must be positive and finite"));
  EXPECT_THAT(error_of({{"scale", scalar_tensor(8, kFloat64, cpu)}, {"growth_tracker", tracker}}),
              ::testing::HasSubstr("'scale' must be float32"));
  EXPECT_THAT(error_of({{"scale", scalar_tensor(8, kFloat32, cpu)}, {"growth_tracker", scalar_tensor(5, kInt32, cpu)}}),
              ::testing::HasSubstr("'growth_tracker' must be in [0, 5)"));
  EXPECT_THAT(error_of({{"scale", scalar_tensor(8, kFloat32, cpu)}}), ::testing::HasSubstr("missing 'growth_tracker'"));
  EXPECT_THAT(error_of({{"scale", scalar_tensor(8, kFloat32, cpu)}, {"growth_tracker", tracker}, {"x", tracker}}),
              ::testing::HasSubstr("unknown entry 'x'"));
}

TEST_F(GradScalerTest, OptionsAreChecked) {
  auto error_of = [&](GradScalerOptions o) {
    try {
      GradScaler s(cpu, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GradScalerOptions o;
  o.init_scale = 1e39;
  EXPECT_THAT(error_of(o), ::testing::HasSubstr("init_scale must be a positive finite float32 value"));
  o = {};
  o.growth_factor = 1.0;
  EXPECT_THAT(error_of(o), ::testing::HasSubstr("growth_factor must be > 1"));
  o = {};
  o.backoff_factor = 1.0;
  EXPECT_THAT(error_of(o), ::testing::HasSubstr("backoff_factor must be in (0, 1)"));
  o = {};
  o.growth_interval = 0;
  EXPECT_THAT(error_of(o), ::testing::HasSubstr("growth_interval must be in [1, 2147483647]"));
}

}  // namespace
}  // namespace dp
