// The step profiler: host-clock phases on the CPU, device markers read one step late on a GPU.
#include <gtest/gtest.h>

#include <thread>

#include "launch/step_profiler.h"
#include "runtime/core/runtime.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

TEST(StepProfiler, HostPhasesAverageOverSteps) {
  Runtime runtime;
  StepProfiler profiler(&runtime.cpu().backend());
  EXPECT_FALSE(profiler.device_timed());
  for (int step = 0; step < 2; ++step) {
    profiler.begin(Phase::Data);
    std::this_thread::sleep_for(2ms);
    profiler.begin(Phase::Forward);
    std::this_thread::sleep_for(4ms);
    profiler.end();
    profiler.step_done();
  }
  EXPECT_EQ(profiler.steps(), 2);
  // Lower bounds only: a sleep lasts at least its time, however loaded the machine is.
  EXPECT_GE(profiler.ms_per_step(Phase::Data), 2.0);
  EXPECT_GE(profiler.ms_per_step(Phase::Forward), 4.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Backward), 0.0);
  EXPECT_NE(profiler.summary().find("forward"), std::string::npos);
  EXPECT_EQ(profiler.summary().find("checkpoint"), std::string::npos) << "no checkpoint written, none shown";
  profiler.reset();
  EXPECT_EQ(profiler.steps(), 0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Forward), 0.0);
}

// A checkpoint written after one step of four: its time amortised over the four, and shown.
TEST(StepProfiler, CheckpointTimeIsAmortisedOverTheSteps) {
  Runtime runtime;
  StepProfiler profiler(&runtime.cpu().backend());
  for (int step = 0; step < 4; ++step) {
    profiler.begin(Phase::Forward);
    profiler.end();
    profiler.step_done();
    if (step == 1) {
      const PhaseScope timed(profiler, Phase::Checkpoint);
      std::this_thread::sleep_for(20ms);
    }
  }
  EXPECT_GE(profiler.ms_per_step(Phase::Checkpoint), 5.0);
  EXPECT_NE(profiler.summary().find("checkpoint"), std::string::npos) << profiler.summary();
}

// run.cuda_graphs: a replayed step is one "graph" phase, shown only in runs that have one.
TEST(StepProfiler, TheGraphPhaseIsShownOnlyWhenStepsWereReplayed) {
  Runtime runtime;
  StepProfiler profiler(&runtime.cpu().backend());
  profiler.begin(Phase::Forward);
  profiler.end();
  profiler.step_done();
  EXPECT_EQ(profiler.summary().find("graph"), std::string::npos) << profiler.summary();
  profiler.begin(Phase::Graph);
  std::this_thread::sleep_for(4ms);
  profiler.end();
  profiler.step_done();
  EXPECT_GE(profiler.ms_per_step(Phase::Graph), 2.0);  // 4 ms over 2 steps
  EXPECT_NE(profiler.summary().find("| graph "), std::string::npos) << profiler.summary();
}

TEST(StepProfiler, GpuPhasesAreReadOneStepLate) {
  if (Runtime::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA GPU is visible (no driver or no device); this test needs one";
  Runtime runtime;
  StepProfiler profiler(&runtime.cuda(0).backend());
  EXPECT_TRUE(profiler.device_timed());
  for (int step = 0; step < 3; ++step) {
    profiler.begin(Phase::Data);
    profiler.begin(Phase::Forward);
    profiler.begin(Phase::Optimizer);
    profiler.end();
    profiler.step_done();
    const PhaseScope timed(profiler, Phase::Checkpoint);  // host time, as on the CPU
    std::this_thread::sleep_for(3ms);
  }
  EXPECT_EQ(profiler.steps(), 3);
  profiler.flush();
  EXPECT_GE(profiler.ms_per_step(Phase::Forward), 0.0);
  EXPECT_GE(profiler.ms_per_step(Phase::Checkpoint), 3.0);
  EXPECT_NE(profiler.summary().find("device time"), std::string::npos);
}

}  // namespace
}  // namespace dp
