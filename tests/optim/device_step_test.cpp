// The device-resident optimiser step (NOTE [ Device-resident optimiser step ] in optim/optimizer.h):
// a step gated by found_inf and driven by a device lr gives bit-identical results to the same
// step driven from the host; an injected inf skips the step leaving weights, buffers and step
// counts bit-identical, and the clock then gives the applied steps the schedule's lrs; and for
// SGD, AdamW, LARS and LAMB the whole optimiser half of a training step (unscale, clipping, step,
// clock, scaler update) runs with host reads forbidden (NOTE [ Host-sync checking ]).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/lamb.h"
#include "optim/lars.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/error.h"
#include "runtime/core/host_sync.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

struct Named {
  std::string name;
  MakeOptimizer make;
};

std::vector<Named> optimizers() {
  return {
      {"sgd", [](std::vector<ParamGroup> g) {
         return std::make_unique<SGD>(std::move(g), SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
       }},
      {"sgd_nesterov", [](std::vector<ParamGroup> g) {
         return std::make_unique<SGD>(std::move(g), SgdOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
       }},
      {"adamw", [](std::vector<ParamGroup> g) {
         return std::make_unique<AdamW>(std::move(g), AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
       }},
      {"lars", [](std::vector<ParamGroup> g) { return std::make_unique<LARS>(std::move(g), LarsOptions{.lr = 0.5}); }},
      {"lamb", [](std::vector<ParamGroup> g) {
         return std::make_unique<LAMB>(std::move(g), LambOptions{.lr = 0.01, .weight_decay = 0.01});
       }},
  };
}

class DeviceStepTest : public ::testing::TestWithParam<size_t> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};

  // Two groups (the second with lr_scale 0.5): a [40, 30] weight, a [7] bias.
  std::vector<ParamGroup> make_groups() {
    Generator gen(11);
    std::vector<ParamGroup> groups(2);
    groups[0].params.push_back(randn({40, 30}, gen, kFloat32, cpu).set_requires_grad(true));
    groups[1].params.push_back(randn({7}, gen, kFloat32, cpu).set_requires_grad(true));
    groups[0].lr = 0.1;
    groups[1].lr = 0.05;
    groups[1].weight_decay = 0.0;
    groups[1].adapt = false;
    groups[1].lr_scale = 0.5;
    return groups;
  }

  // Step k's gradients: fixed values, times `scale`, with an inf at step `bad` (none when < 0).
  static void set_grads(const std::vector<Tensor>& params, int step, float scale, int bad) {
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<float> g(static_cast<size_t>(params[i].numel()));
      for (size_t j = 0; j < g.size(); ++j)
        g[j] = scale * static_cast<float>(std::sin(0.37 * static_cast<double>(j + 1) + 1.3 * step + static_cast<double>(i)));
      if (step == bad && i == 0) g[5] = kInf;
      Tensor p = params[i];
      p.set_grad(from_vector(g, p.shape(), p.device()));
    }
  }

  static std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& tensors) {
    std::vector<std::vector<uint8_t>> out;
    for (const Tensor& t : tensors) {
      const Tensor c = t.contiguous();
      std::vector<uint8_t> b(c.nbytes());
      std::memcpy(b.data(), c.raw_data(), b.size());
      out.push_back(std::move(b));
    }
    return out;
  }

  static std::vector<Tensor> state_tensors(const Optimizer& o) {
    std::vector<Tensor> out;
    for (const auto& [name, t] : o.state_dict()) out.push_back(t.clone());
    return out;
  }

  // `steps` training steps through the trainer's sequence: clock lr, (scaled) gradients, unscale,
  // clipping on the device, step, clock, update. `bad` injects an inf; step `omit` is left out
  // altogether (none when < 0); with `forbid` the optimiser half runs under ForbidHostSyncGuard.
  // Returns the bytes of the parameters and the optimiser state after the run.
  std::vector<std::vector<uint8_t>> run(const Named& o, int steps, int bad, bool scaling, bool forbid,
                                        int64_t* clock_steps = nullptr, int omit = -1) {
    std::vector<ParamGroup> groups = make_groups();
    std::vector<Tensor> params;
    for (const ParamGroup& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
    std::unique_ptr<Optimizer> optimizer = o.make(std::move(groups));
    LrScheduleOptions so;
    so.base_lr = 0.1;
    so.total_steps = steps;
    so.warmup_steps = 2;
    auto schedule = make_lr_schedule("cosine", so);
    ScheduleClock clock(*schedule, steps, cpu, /*count_skipped_steps=*/false);
    GradScalerOptions gso;
    gso.enabled = scaling;
    gso.growth_interval = 2;
    GradScaler scaler(cpu, gso);
    for (int k = 0; k < steps; ++k) {
      if (k == omit) continue;
      // Scaled by a power of two: unscaling is exact, so the trajectory does not depend on S.
      set_grads(params, k, scaling ? static_cast<float>(scaler.get_scale()) : 1.0f, bad);
      std::unique_ptr<ForbidHostSyncGuard> guard;
      if (forbid) guard = std::make_unique<ForbidHostSyncGuard>("the optimiser half of a step");
      const Tensor& lr = clock.next_lr();
      scaler.unscale(params);
      clip_grad_norm_on_device_(params, 5.0, scaler.found_inf());
      scaler.step(*optimizer, lr);
      clock.step_done(scaler.found_inf());
      scaler.update();
      guard.reset();
      optimizer->zero_grad();
    }
    if (clock_steps) *clock_steps = clock.steps();
    std::vector<Tensor> out = params;
    for (const Tensor& t : state_tensors(*optimizer)) out.push_back(t);
    return bytes_of(out);
  }
};

// A device-gated step with found_inf 0 and the lr on the device is the host-driven step, bit
// for bit (the same doubles, computed in the kernel instead of the caller).
TEST_P(DeviceStepTest, DeviceDrivenStepsEqualHostDrivenOnes) {
  const Named o = optimizers()[GetParam()];
  auto once = [&](bool device_driven) {
    std::vector<ParamGroup> groups = make_groups();
    std::vector<Tensor> params;
    for (const ParamGroup& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
    std::unique_ptr<Optimizer> optimizer = o.make(std::move(groups));
    Tensor found = scalar_tensor(0, kFloat32, cpu);
    for (int k = 0; k < 5; ++k) {
      set_grads(params, k, 1.0f, -1);
      const double lr = 0.02 * (k + 1);
      if (device_driven) {
        optimizer->step(DeviceStep{found, scalar_tensor(lr, kFloat64, cpu)});
      } else {
        optimizer->set_lr(lr);
        optimizer->step();
      }
      optimizer->zero_grad();
    }
    EXPECT_EQ(optimizer->step_count(0, 0), 5);
    std::vector<Tensor> out = params;
    for (const Tensor& t : state_tensors(*optimizer)) out.push_back(t);
    return bytes_of(out);
  };
  EXPECT_EQ(once(true), once(false)) << o.name;
}

// An inf at step 3 (of 8) skips that step: the run equals a 7-step run whose gradients are those
// of steps 0-2 and 4-7, bit for bit — weights, buffers and step counts; the schedule clock counts
// only the applied steps, so those steps see the same lrs.
TEST_P(DeviceStepTest, AnInfSkipsTheStepAndTheScheduleWaits) {
  const Named o = optimizers()[GetParam()];
  for (bool scaling : {false, true}) {
    int64_t clock_with = 0, clock_without = 0;
    // The reference run sees the same gradient sequence minus the bad step.
    const auto with_bad = run(o, 8, 3, scaling, false, &clock_with);
    const auto without = run(o, 8, -1, scaling, false, &clock_without, /*omit=*/3);
    EXPECT_EQ(with_bad, without) << o.name << (scaling ? " with loss scaling" : " with clipping only");
    EXPECT_EQ(clock_with, 7);
    EXPECT_EQ(clock_without, 7);
  }
}

// The optimiser half of a step reads nothing on the host (LAMB too: its global norm, divisor and
// trust ratios stay on the device).
TEST_P(DeviceStepTest, TheStepReadsNothingOnTheHost) {
  const Named o = optimizers()[GetParam()];
  std::vector<ParamGroup> groups = make_groups();
  EXPECT_TRUE(o.make(std::move(groups))->steps_on_device()) << o.name;
  EXPECT_NO_THROW(run(o, 4, 2, true, /*forbid=*/true)) << o.name;
  EXPECT_EQ(run(o, 4, 2, true, true), run(o, 4, 2, true, false)) << o.name;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, DeviceStepTest, ::testing::Range<size_t>(0, 5),
                         [](const ::testing::TestParamInfo<size_t>& info) { return optimizers()[info.param].name; });

TEST(HostSyncGuardTest, ForbidsReadsInItsScopeAndNests) {
  CpuBackend backend{1};
  const Device cpu{&backend};
  const Tensor t = scalar_tensor(3, kFloat32, cpu);
  EXPECT_FALSE(host_sync_forbidden());
  {
    ForbidHostSyncGuard guard("region A");
    EXPECT_TRUE(host_sync_forbidden());
    try {
      (void)t.item<float>();
      FAIL() << "item() inside a forbidding guard";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("Tensor::item reads a device value on the host inside region A"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW((void)t.to_vector<float>(), Error);
    {
      AllowHostSyncGuard allow;
      EXPECT_EQ(t.item<float>(), 3.0f);
    }
    EXPECT_THROW((void)t.item<float>(), Error);
  }
  EXPECT_FALSE(host_sync_forbidden());
  EXPECT_EQ(t.item<float>(), 3.0f);
}

}  // namespace
}  // namespace dp
