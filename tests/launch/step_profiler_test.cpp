// The step profiler: host-clock phases on the CPU, device markers read one step late on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "launch/step_profiler.h"
#include "runtime/core/runtime.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

// A device that runs asynchronously to the host, on a simulated clock: the test says when the
// host queues work and how long the device takes; a marker is passed when the device reaches it
// (the later of the end of the work queued before it and the moment it was queued), as a CUDA
// event is. Lets the profiler's device timing be checked without a GPU.
class SimulatedQueue final : public Backend {
 public:
  DeviceType device_type() const override { return DeviceType::CUDA; }
  int device_index() const override { return 0; }
  bool supports(Kernel, DType) const override { return false; }
  void* allocate(size_t) override { return nullptr; }
  void deallocate(void*, size_t) override {}
  void copy_from_host(void*, const void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  void synchronize() override {}
  // Never called: the profiler only records and reads markers.
  void copy(const Tensor&, const Tensor&) override { unsupported("copy"); }
  void fill(const Tensor&, double) override { unsupported("fill"); }
  void arange(const Tensor&, double, double) override { unsupported("arange"); }
  void random(const Tensor&, RandomDist, double, double, uint64_t, uint64_t, const Tensor&) override {
    unsupported("random");
  }

  class Marker final : public DeviceMarker {
   public:
    explicit Marker(SimulatedQueue& queue) : queue_(queue) {}
    void record() override { passed_at_ms_ = queue_.queue_point(); }
    double ms_since(const DeviceMarker& earlier) const override {
      return passed_at_ms_ - static_cast<const Marker&>(earlier).passed_at_ms_;
    }

   private:
    SimulatedQueue& queue_;
    double passed_at_ms_ = 0.0;
  };
  std::unique_ptr<DeviceMarker> make_marker() override { return std::make_unique<Marker>(*this); }

  // The host's simulated clock moves on by `ms` (the host works, or waits).
  void host_spends(double ms) { host_ms_ += ms; }
  // The host queues work the device takes `ms` for.
  void queue_work(double ms) { queue_end_ms_ = queue_point() + ms; }

 private:
  double queue_point() {
    queue_end_ms_ = std::max(queue_end_ms_, host_ms_);
    return queue_end_ms_;
  }
  double host_ms_ = 0.0;
  double queue_end_ms_ = 0.0;
};

// One step as the trainer times it: fetch the batch (the host spends data_ms), then forward and
// backward, each queueing device work.
void simulated_step(StepProfiler& profiler, SimulatedQueue& device, double data_ms, double forward_ms,
                    double backward_ms) {
  profiler.begin(Phase::Data);
  device.host_spends(data_ms);
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(data_ms));  // the host clock's share
  profiler.begin(Phase::Forward);
  device.queue_work(forward_ms);
  profiler.begin(Phase::Backward);
  device.queue_work(backward_ms);
  profiler.end();
  profiler.step_done();
}

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
  EXPECT_EQ(profiler.host_data_ms_per_step(), profiler.ms_per_step(Phase::Data)) << "the CPU's only clock is the host's";
  EXPECT_NE(profiler.summary().find("forward"), std::string::npos);
  EXPECT_EQ(profiler.summary().find("checkpoint"), std::string::npos) << "no checkpoint written, none shown";
  profiler.reset();
  EXPECT_EQ(profiler.steps(), 0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Forward), 0.0);
}

// A checkpoint written after one step of four: its time amortised over the four, and shown.
// A window's average (the metrics' window_ms_per_step) counts only the steps since its mark: a
// slow first step weighs on the epoch's average, not on a later window's.
TEST(StepProfiler, AWindowAveragesOnlyItsOwnSteps) {
  Runtime runtime;
  StepProfiler profiler(&runtime.cpu().backend());
  profiler.begin(Phase::Forward);
  std::this_thread::sleep_for(300ms);  // the slow first step
  profiler.end();
  profiler.step_done();
  const StepProfiler::Mark mark = profiler.mark_now();
  EXPECT_EQ(profiler.ms_per_step_since(Phase::Forward, mark), 0.0);  // no step since
  for (int step = 0; step < 3; ++step) {
    profiler.begin(Phase::Forward);
    profiler.end();
    profiler.step_done();
  }
  EXPECT_GE(profiler.ms_per_step(Phase::Forward), 75.0);  // 300 ms over 4 steps
  // Upper bound only where nothing sleeps: three empty phases take far less than 300 ms / 4.
  EXPECT_LT(profiler.ms_per_step_since(Phase::Forward, mark), 75.0);
}

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

// NOTE [ Step timing on a GPU ]: the data phase is what the device waited for the batch. While
// the host runs ahead of the device, fetching a batch costs the step nothing however long it
// takes the host; the host's own time is shown beside it.
TEST(StepProfiler, OnADeviceTheDataPhaseIsTheDevicesWaitNotTheHosts) {
  SimulatedQueue device;
  StepProfiler profiler(&device);
  ASSERT_TRUE(profiler.device_timed());
  simulated_step(profiler, device, /*data_ms=*/2.0, 10.0, 20.0);  // the first: nothing queued yet, the device waits
  profiler.flush();
  EXPECT_EQ(profiler.ms_per_step(Phase::Data), 2.0);
  profiler.reset();
  for (int step = 0; step < 4; ++step) simulated_step(profiler, device, /*data_ms=*/2.0, 10.0, 20.0);
  profiler.flush();
  EXPECT_EQ(profiler.ms_per_step(Phase::Data), 0.0) << "the device had a step queued while the host fetched";
  EXPECT_GE(profiler.host_data_ms_per_step(), 2.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Forward), 10.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Backward), 20.0);
  EXPECT_NE(profiler.summary().find("data 0.00 ms (host "), std::string::npos) << profiler.summary();
}

// A loader slower than the device: the host fetches batch n+1 (8 ms) while the device runs step
// n (3 ms), so the device idles 5 ms a step between the data phase's markers, and that idle time
// is the data phase; the phases add up to the step's time, which the loader sets.
TEST(StepProfiler, OnADeviceASlowLoaderIsTheDevicesIdleTime) {
  SimulatedQueue device;
  StepProfiler profiler(&device);
  simulated_step(profiler, device, /*data_ms=*/8.0, 1.0, 2.0);  // nothing to overlap with yet
  profiler.flush();
  EXPECT_EQ(profiler.ms_per_step(Phase::Data), 8.0);
  profiler.reset();
  for (int step = 0; step < 4; ++step) simulated_step(profiler, device, /*data_ms=*/8.0, 1.0, 2.0);
  profiler.flush();
  EXPECT_EQ(profiler.ms_per_step(Phase::Data), 5.0);
  EXPECT_GE(profiler.host_data_ms_per_step(), 8.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Forward), 1.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Data) + profiler.ms_per_step(Phase::Forward) +
                profiler.ms_per_step(Phase::Backward),
            8.0);
  profiler.reset();
  EXPECT_EQ(profiler.host_data_ms_per_step(), 0.0);
  EXPECT_EQ(profiler.ms_per_step(Phase::Data), 0.0);
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
