// The reducer's communication spans on a device's clock (NOTE [ Communication timed on the
// device ] in comm/ddp/reducer.h), without a GPU: a one-rank group whose collectives finish when
// the test says, at device times the test sets, stands in for NCCL's events. What is checked is
// the bookkeeping — which Works make a step's span, when a span is read (never before the device
// has run it, in step order), what is never timed — which the GPU test in
// tests/comm/nccl/graph_nccltest.cpp then checks against real events.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "comm/ddp/reducer.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

// A collective on a pretend device: its inputs ready at `ready_ms`, run until `done_ms`, completed
// once the test sets `done`.
class ClockWork final : public Work {
 public:
  ClockWork(uint64_t sequence, const CollectiveFingerprint& fingerprint, bool captured)
      : Work(sequence, fingerprint), captured_(captured) {}
  bool is_completed() const override { return done && !captured_; }
  void wait() override {}
  bool captured() const override { return captured_; }
  std::optional<double> device_ms_since_ready_of(const Work& first) const override {
    const auto& from = dynamic_cast<const ClockWork&>(first);
    if (!done || failed || captured_ || from.captured_) return std::nullopt;
    return done_ms - from.ready_ms;
  }

  bool done = false, failed = false;
  double ready_ms = 0, done_ms = 0;

 private:
  const bool captured_;
};

// One rank: an all-reduce leaves the tensor as it is; every collective is kept for the test.
class ClockGroup final : public ProcessGroup {
 public:
  explicit ClockGroup(bool on_device) : on_device_(on_device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend_name() const override { return "clock"; }
  bool times_on_device() const override { return on_device_; }
  WorkPtr all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag) override {
    auto work = std::make_shared<ClockWork>(
        works.size(), CollectiveFingerprint{CollectiveOp::AllReduce, op, tensor.dtype(), tensor.numel(), -1, tag},
        capturing);
    works.push_back(work);
    return work;
  }
  WorkPtr broadcast(const Tensor&, int, int64_t) override { return unexpected(); }
  WorkPtr all_gather(const Tensor&, const Tensor&, int64_t) override { return unexpected(); }
  WorkPtr reduce_scatter(const Tensor&, const Tensor&, CollectiveReduce, int64_t) override { return unexpected(); }
  WorkPtr barrier(int64_t) override { return unexpected(); }

  std::vector<std::shared_ptr<ClockWork>> works;
  bool capturing = false;  // the next collectives are recorded into a graph

 private:
  static WorkPtr unexpected() { throw std::logic_error("the reducer should only all-reduce here"); }
  const bool on_device_;
};

class ReducerDeviceTimeTest : public ::testing::Test {
 protected:
  // Two parameters in two buckets: two all-reduces a step. No re-plan, so no broadcast.
  void make_reducer(ClockGroup& group) {
    Generator gen(7);
    w1 = randn({8, 8}, gen, kFloat32, cpu_).set_requires_grad(true);
    w2 = randn({8, 4}, gen, kFloat32, cpu_).set_requires_grad(true);
    ReducerOptions o;
    o.first_bucket_bytes = 64;
    o.replan_from_ready_order = false;
    reducer = std::make_unique<Reducer>(std::vector<nn::NamedTensor>{{"w1", w1}, {"w2", w2}}, group, o);
    ASSERT_EQ(reducer->buckets().size(), 2u);
  }
  // One synchronised step; returns its two collectives (first launched, last launched).
  std::pair<std::shared_ptr<ClockWork>, std::shared_ptr<ClockWork>> step(ClockGroup& group) {
    const size_t before = group.works.size();
    reducer->prepare_for_backward();
    Generator gen(11);
    const Tensor x = randn({4, 8}, gen, kFloat32, cpu_);
    sum(matmul(relu(matmul(x, w1)), w2)).backward();
    reducer->finish();
    EXPECT_EQ(group.works.size(), before + 2);
    w1.set_grad(Tensor());
    w2.set_grad(Tensor());
    return {group.works[before], group.works[before + 1]};
  }
  static void run_on_device(ClockWork& first, ClockWork& last, double ready_ms, double first_done_ms,
                            double last_done_ms) {
    first.ready_ms = ready_ms;
    first.done_ms = first_done_ms;
    last.ready_ms = first_done_ms;
    last.done_ms = last_done_ms;
    first.done = last.done = true;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  Tensor w1, w2;
  std::unique_ptr<Reducer> reducer;
};

TEST_F(ReducerDeviceTimeTest, AStepsSpanRunsFromTheFirstBucketsReadyToTheLastBucketsEnd) {
  ClockGroup group(/*on_device=*/true);
  make_reducer(group);
  auto [first, last] = step(group);
  EXPECT_EQ(reducer->take_device_comm_time().steps, 0) << "read before the device ran it";
  run_on_device(*first, *last, 10.0, 11.5, 14.5);
  const DeviceCommTime t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps, 1);
  EXPECT_DOUBLE_EQ(t.comm_ms, 4.5) << "from the first bucket's ready to the last bucket's end";
  EXPECT_EQ(t.untimed, 0);
  const DeviceCommTime again = reducer->take_device_comm_time();
  EXPECT_EQ(again.steps, 0) << "a span is taken once";
  EXPECT_EQ(again.comm_ms, 0.0);
}

TEST_F(ReducerDeviceTimeTest, StepsAreReadInOrderOnceTheDeviceHasRunThem) {
  ClockGroup group(true);
  make_reducer(group);
  auto [a_first, a_last] = step(group);
  auto [b_first, b_last] = step(group);
  auto [c_first, c_last] = step(group);
  run_on_device(*b_first, *b_last, 20, 21, 23);  // as if the first step had not finished
  EXPECT_EQ(reducer->take_device_comm_time().steps, 0) << "an unfinished step holds back the later ones";
  run_on_device(*a_first, *a_last, 10, 11, 12);
  DeviceCommTime t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps, 2);
  EXPECT_DOUBLE_EQ(t.comm_ms, 2.0 + 3.0);
  run_on_device(*c_first, *c_last, 30, 30.5, 31);
  t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps, 1);
  EXPECT_DOUBLE_EQ(t.comm_ms, 1.0);
}

TEST_F(ReducerDeviceTimeTest, CapturedAndFailedStepsAreCountedUntimed) {
  ClockGroup group(true);
  make_reducer(group);
  group.capturing = true;
  step(group);  // recorded into a graph: never completes, never kept
  group.capturing = false;
  auto [first, last] = step(group);
  run_on_device(*first, *last, 1, 2, 3);
  last->failed = true;
  const DeviceCommTime t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps, 0);
  EXPECT_EQ(t.untimed, 2);
  EXPECT_EQ(t.comm_ms, 0.0);
  EXPECT_EQ(group.works[0].use_count(), 1) << "the reducer kept a captured step's Work";  // the group's list
}

TEST_F(ReducerDeviceTimeTest, OldStepsAreDroppedUnreadWhenTheHostRunsFarAhead) {
  ClockGroup group(true);
  make_reducer(group);
  constexpr int kSteps = 70;  // more than the reducer keeps (64)
  std::vector<std::pair<std::shared_ptr<ClockWork>, std::shared_ptr<ClockWork>>> steps;
  for (int i = 0; i < kSteps; ++i) steps.push_back(step(group));
  // Held by the group's list and this test, and by the reducer while it keeps the step.
  EXPECT_EQ(steps.front().first.use_count(), 2) << "the oldest step is still kept";
  EXPECT_EQ(steps.back().first.use_count(), 3) << "the newest step is not kept";
  for (int i = 0; i < kSteps; ++i) run_on_device(*steps[i].first, *steps[i].second, i, i + 0.25, i + 0.5);
  const DeviceCommTime t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps + t.untimed, kSteps);
  EXPECT_EQ(t.untimed, kSteps - 64);
  EXPECT_DOUBLE_EQ(t.comm_ms, 0.5 * 64);
}

TEST_F(ReducerDeviceTimeTest, HostTimedGroupsKeepNothing) {
  ClockGroup group(/*on_device=*/false);
  make_reducer(group);
  auto [first, last] = step(group);
  run_on_device(*first, *last, 0, 1, 2);
  const DeviceCommTime t = reducer->take_device_comm_time();
  EXPECT_EQ(t.steps, 0);
  EXPECT_EQ(t.untimed, 0);
  EXPECT_EQ(first.use_count(), 2) << "held by the group's list and this test only";
}

}  // namespace
}  // namespace dp
