// NCCL collectives inside CUDA graphs (NOTE [ Collectives in CUDA graphs ] in
// comm/nccl/nccl_process_group.h): a collective submitted during a capture is recorded, runs at
// every replay queued through replay_graph(), and host waits are refused; a data-parallel step
// (the DDP reducer's hooks and bucket all-reduces) captured once and replayed ends where the same
// steps run eagerly end, bit for bit. Run by mpirun with 1 and 2 ranks like every NCCL test.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <memory>
#include <thread>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/ddp/reducer.h"
#include "comm/nccl/nccl_process_group.h"
#include "common/expect_error.h"
#include "nccl_test_environment.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

class NcclGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::nccl_skip_reason().empty()) GTEST_SKIP() << testing::nccl_skip_reason();
    gpu_ = runtime_.cuda(testing::test_mpi().layout().local_rank);
    group_ = std::make_unique<NcclProcessGroup>(testing::test_mpi(), gpu_, options_);
  }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  Backend& backend() { return gpu_.backend(); }

  Runtime runtime_;  // declared first: its CUDA backend outlives the group
  Device cpu_ = runtime_.cpu();
  Device gpu_;
  NcclProcessGroupOptions options_;
  std::unique_ptr<NcclProcessGroup> group_;
};

TEST_F(NcclGraphTest, CapturedAllReduceRunsAtEveryReplay) {
  EXPECT_TRUE(group_->captures_collectives());
  constexpr int64_t n = 1000;
  Tensor x = zeros({n}, kFloat32, gpu_);  // the graph's static input
  Tensor bucket = zeros({n}, kFloat32, gpu_);
  group_->all_reduce(bucket, CollectiveReduce::Sum)->wait();  // NCCL's own set-up, outside the capture
  group_->synchronize();
  const uint64_t first = group_->log().next_sequence();

  Tensor y;
  WorkPtr recorded;
  std::unique_ptr<DeviceGraph> graph = capture_graph(backend(), [&] {
    bucket.copy_(mul(x, 3.0));
    recorded = group_->all_reduce(bucket, CollectiveReduce::Average, /*tag=*/4);
    recorded->wait();  // the join, recorded into the graph
    y = add(bucket, 1.0);
  });
  auto* nccl_work = dynamic_cast<NcclWork*>(recorded.get());
  ASSERT_NE(nccl_work, nullptr);
  EXPECT_TRUE(nccl_work->captured());
  EXPECT_FALSE(recorded->is_completed());
  ASSERT_TRUE(group_->log().find(first).has_value());
  EXPECT_EQ(group_->log().find(first)->state, CollectiveState::Captured);
  EXPECT_EQ(group_->log().find(first)->fingerprint.str(), "all_reduce(average, float32 x 1000, tag 4)");

  // Replay k: rank r's input is (r + 1)(k + 1), so y = 3 · mean_r(r + 1) · (k + 1) + 1.
  for (int k = 0; k < 3; ++k) {
    backend().fill(x, (rank() + 1.0) * (k + 1.0));
    group_->replay_graph([&] { graph->replay(); }, 1)->wait();
    const std::vector<float> got = y.to_vector<float>();
    const float want = static_cast<float>(3.0 * (size() + 1) / 2.0 * (k + 1) + 1.0);
    int64_t wrong = 0;
    for (float v : got) wrong += v != want;
    EXPECT_EQ(wrong, 0) << "replay " << k << ": y[0] = " << got[0] << ", want " << want;
  }
  group_->synchronize();
  const std::vector<CollectiveRecord> records = group_->log().recent();
  ASSERT_GE(records.size(), 4u);
  for (size_t k = records.size() - 3; k < records.size(); ++k) {
    EXPECT_EQ(records[k].fingerprint.str(), "graph_replay(1 collective)");
    EXPECT_EQ(records[k].state, CollectiveState::Completed);
  }
  // The group is still healthy for eager collectives.
  Tensor t = full({4}, rank() + 1.0, kFloat32, gpu_);
  group_->all_reduce(t, CollectiveReduce::Sum)->wait();
  EXPECT_EQ(t.to_vector<float>()[0], static_cast<float>(size() * (size() + 1) / 2));
}

TEST_F(NcclGraphTest, HostWaitsAreRefusedDuringACapture) {
  Tensor t = zeros({16}, kFloat32, gpu_);
  group_->all_reduce(t, CollectiveReduce::Sum)->wait();
  group_->synchronize();
  std::unique_ptr<DeviceGraph> graph = capture_graph(backend(), [&] {
    EXPECT_ERROR_CONTAINS(group_->barrier(), "barrier on rank " + std::to_string(rank()) +
                                                 " of " + std::to_string(size()) +
                                                 ": it blocks the host until every rank has reached it, which a "
                                                 "CUDA graph capture cannot hold");
    EXPECT_ERROR_CONTAINS(group_->synchronize(), "synchronize on rank " + std::to_string(rank()) + " of " +
                                                     std::to_string(size()) +
                                                     ": a host wait during a CUDA graph capture");
    WorkPtr w = group_->all_reduce(t, CollectiveReduce::Sum);
    EXPECT_ERROR_CONTAINS(dynamic_cast<NcclWork&>(*w).synchronize(),
                          "a host wait for a collective recorded into a CUDA graph");
    w->wait();
  });
  ASSERT_NE(graph, nullptr);
  group_->replay_graph([&] { graph->replay(); }, 1)->wait();
  group_->barrier()->wait();  // outside a capture, as before
}

// A two-layer perceptron's data-parallel SGD step: forward, backward with the reducer's hooks
// (gradients written into the buckets, bucket all-reduces launched as they fill), finish(), update.
struct DdpStep {
  DdpStep(Device gpu, ProcessGroup& group) {
    Generator gen(5);  // the same weights on every rank
    w1 = randn({8, 32}, gen, kFloat32, gpu, 0.0, 0.3).set_requires_grad(true);
    w2 = randn({32, 4}, gen, kFloat32, gpu, 0.0, 0.3).set_requires_grad(true);
    ReducerOptions o;
    o.first_bucket_bytes = 512;  // two buckets: the all-reduces of both overlap backward
    reducer = std::make_unique<Reducer>(std::vector<nn::NamedTensor>{{"w1", w1}, {"w2", w2}}, group, o);
  }
  void run(const Tensor& x, const Tensor& target) {
    reducer->prepare_for_backward();
    const Tensor out = matmul(relu(matmul(x, w1)), w2);
    mean(square(sub(out, target))).backward();
    reducer->finish();
    NoGradGuard no_grad;
    for (Tensor* w : {&w1, &w2}) {
      w->copy_(sub(*w, mul(w->grad(), 0.05)));
      w->set_grad(Tensor());  // set to none: the next backward writes into the bucket again
    }
  }
  Tensor w1, w2;
  std::unique_ptr<Reducer> reducer;
};

TEST_F(NcclGraphTest, ReducerStepReplaysEndWhereEagerStepsEnd) {
  // Rank-dependent batches: the average over ranks matters with two ranks.
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int s = 0; s < 8; ++s) {
    Generator gen(100 + 10 * s + rank());
    batches.emplace_back(randn({16, 8}, gen, kFloat32, gpu_), randn({16, 4}, gen, kFloat32, gpu_));
  }
  DdpStep eager(gpu_, *group_), graphed(gpu_, *group_);
  const std::vector<float> initial = graphed.w1.to_vector<float>();
  for (const auto& [x, target] : batches) eager.run(x, target);

  // Three eager steps (the reducer re-plans its buckets in the second), then one capture and a
  // replay for each of the five remaining batches.
  for (int s = 0; s < 3; ++s) graphed.run(batches[s].first, batches[s].second);
  ASSERT_TRUE(graphed.reducer->settled());
  Tensor x = zeros({16, 8}, kFloat32, gpu_), target = zeros({16, 4}, kFloat32, gpu_);
  const uint64_t first = group_->log().next_sequence();
  std::unique_ptr<DeviceGraph> graph = capture_graph(backend(), [&] { graphed.run(x, target); });
  const auto collectives = static_cast<int64_t>(group_->log().next_sequence() - first);
  EXPECT_EQ(collectives, static_cast<int64_t>(graphed.reducer->buckets().size()));
  EXPECT_EQ(graphed.reducer->buckets().size(), 2u);
  for (int s = 3; s < 8; ++s) {
    x.copy_(batches[s].first);
    target.copy_(batches[s].second);
    group_->replay_graph([&] { graph->replay(); }, collectives)->wait();
  }
  group_->synchronize();
  for (const auto& [name, a, b] : {std::tuple{"w1", eager.w1, graphed.w1}, std::tuple{"w2", eager.w2, graphed.w2}}) {
    const std::vector<float> want = a.to_vector<float>(), got = b.to_vector<float>();
    int64_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
    EXPECT_EQ(differ, 0) << name << ": replayed steps differ from eager ones";
  }
  EXPECT_NE(graphed.w1.to_vector<float>(), initial) << "the steps did not train";
}

// NOTE [ Communication timed on the device ] (comm/ddp/reducer.h): each eager step's bucket
// all-reduces are timed on the device's clock, from the first bucket's ready to the last one's end
// — within the host's wall time of the steps —, read once the device has run them; a captured
// step has no time of its own and is counted untimed.
TEST_F(NcclGraphTest, EagerStepsCommunicationIsTimedOnTheDeviceAndCapturedStepsAreNot) {
  DdpStep ddp(gpu_, *group_);
  Generator gen(77 + rank());
  const Tensor x = randn({16, 8}, gen, kFloat32, gpu_), target = randn({16, 4}, gen, kFloat32, gpu_);
  group_->synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < 3; ++s) ddp.run(x, target);
  group_->synchronize();  // the device has run every step
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const DeviceCommTime eager = ddp.reducer->take_device_comm_time();
  EXPECT_EQ(eager.steps, 3);
  EXPECT_EQ(eager.untimed, 0);
  EXPECT_GT(eager.comm_ms, 0.0);
  EXPECT_LT(eager.comm_ms, wall_ms);
  EXPECT_EQ(ddp.reducer->take_device_comm_time().steps, 0) << "a span is taken once";

  ASSERT_TRUE(ddp.reducer->settled());
  const uint64_t first = group_->log().next_sequence();
  std::unique_ptr<DeviceGraph> graph = capture_graph(backend(), [&] { ddp.run(x, target); });
  const auto collectives = static_cast<int64_t>(group_->log().next_sequence() - first);
  group_->replay_graph([&] { graph->replay(); }, collectives)->wait();
  group_->synchronize();
  const DeviceCommTime captured = ddp.reducer->take_device_comm_time();
  EXPECT_EQ(captured.steps, 0);
  EXPECT_EQ(captured.untimed, 1);
}

// NOTE [ Aborted by the watchdog alone ]: ncclCommAbort waits until the graphs holding the
// communicator's collectives are destroyed, which the training thread does only once it has seen
// the failure. Rank 1 skips a replay of a captured all-reduce, so rank 0's replay hangs; rank 0's
// watchdog times it out after 3 s. The failure must show (in the log, which has a lock of its
// own) while the abort waits — with the abort made under the group's lock it showed only after
// the graph was gone, and the training thread, needing that lock to see it, would have waited
// forever. Needs two ranks: a one-rank communicator captures plain copies, which abort does not
// wait for.
class NcclGraphWatchdogTest : public NcclGraphTest {
 protected:
  NcclGraphWatchdogTest() { options_.timeout = std::chrono::seconds(3); }
};

TEST_F(NcclGraphWatchdogTest, AHungReplayFailsWhileTheAbortWaitsForItsGraph) {
  if (size() == 1) GTEST_SKIP() << "needs two ranks: one skips the replay the other waits in";
  using Clock = std::chrono::steady_clock;
  Tensor bucket = zeros({1000}, kFloat32, gpu_);
  group_->all_reduce(bucket, CollectiveReduce::Sum)->wait();  // NCCL's own set-up, outside the capture
  group_->synchronize();
  std::unique_ptr<DeviceGraph> graph = capture_graph(backend(), [&] {
    group_->all_reduce(bucket, CollectiveReduce::Sum, /*tag=*/9)->wait();
  });
  EXPECT_NE(graph, nullptr);
  if (rank() == 0 && graph != nullptr) {
    const uint64_t replay_sequence = group_->log().next_sequence();
    WorkPtr hung = group_->replay_graph([&] { graph->replay(); }, 1);
    const Clock::time_point start = Clock::now();
    bool failed = false;
    while (!failed && Clock::now() - start < std::chrono::seconds(20)) {
      const std::optional<CollectiveRecord> record = group_->log().find(replay_sequence);
      failed = record && record->state == CollectiveState::Failed;
      if (!failed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(failed) << "the hung replay was not failed within 20 s while its graph lived";
    if (!failed) graph.reset();  // lets an abort made under the lock end: this test then fails, not hangs
    EXPECT_GE(waited, 2.9);
    EXPECT_TRUE(hung->is_completed());
    EXPECT_ERROR_CONTAINS(hung->wait(), "graph_replay(1 collective): has not completed after");
    graph.reset();  // what lets the watchdog's abort end
    EXPECT_ERROR_CONTAINS(group_->all_reduce(bucket, CollectiveReduce::Sum)->wait(), "the group is broken");
  }
  graph.reset();
  // Rank 1 stays until rank 0 is done; its group's destruction then finalises against an aborted
  // peer at worst until the timeout, then aborts.
  MPI_Barrier(testing::test_mpi().world_comm());
}

}  // namespace
}  // namespace dp
