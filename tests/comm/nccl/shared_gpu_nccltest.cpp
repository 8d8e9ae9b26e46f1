// Two NCCL groups busy on one GPU (NOTE [ Several communicators on one GPU ] in
// comm/nccl/nccl_process_group.h), created as a synchronised-BatchNorm run creates them, with
// collectives of both in flight together, eagerly and inside one CUDA graph. When dptrain sets
// NCCL_LAUNCH_ORDER_IMPLICIT and when it refuses to go on: tests/comm/nccl_launch_order_test.cpp.
//
// NCCL reads the variable once per process, at the first launch of a communicator of ≥ 2 ranks,
// and a one-rank communicator never orders anything: only a fresh process on ≥ 2 GPUs exercises
// the order itself — ctest's comm_nccl_tests.shared_gpu.np2 (tests/comm/CMakeLists.txt) runs this
// suite alone for that, and comm_nccl_tests.np2 leaves it out.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "comm/nccl/nccl_process_group.h"
#include "nccl_test_environment.h"
#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace dp {
namespace {

class NcclSharedGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::nccl_skip_reason().empty()) GTEST_SKIP() << testing::nccl_skip_reason();
    gpu_ = runtime_.cuda(testing::test_mpi().layout().local_rank);
    NcclProcessGroupOptions options;
    options.shares_gpu_with_other_groups = true;
    // As launch/main.cpp creates them for distributed.sync_batchnorm: the gradients', then the
    // statistics', both before any collective.
    try {
      gradients_ = std::make_unique<NcclProcessGroup>(testing::test_mpi(), gpu_, options);
    } catch (const Error& e) {  // the same NCCL on every rank: all skip, or none
      if (std::string(e.what()).find("came with NCCL 2.26") != std::string::npos) GTEST_SKIP() << e.what();
      throw;
    }
    statistics_ = std::make_unique<NcclProcessGroup>(testing::test_mpi(), gpu_, options);
  }
  int rank() const { return gradients_->rank(); }
  int size() const { return gradients_->size(); }

  Runtime runtime_;  // declared first: its CUDA backend outlives the groups
  Device gpu_;
  std::unique_ptr<NcclProcessGroup> gradients_, statistics_;
};

// Every element of `t` equals `want`.
void expect_all(const Tensor& t, float want, const std::string& what) {
  int64_t wrong = 0;
  const std::vector<float> got = t.to_vector<float>();
  for (float v : got) wrong += v != want;
  EXPECT_EQ(wrong, 0) << what << ": [0] = " << got[0] << ", want " << want;
}

TEST_F(NcclSharedGpuTest, CollectivesOfBothGroupsInFlightTogetherEagerlyAndInAGraph) {
  const char* value = std::getenv("NCCL_LAUNCH_ORDER_IMPLICIT");
  ASSERT_NE(value, nullptr) << "the groups did not set NCCL_LAUNCH_ORDER_IMPLICIT";
  // On as NCCL reads it (the rule the groups apply; it throws for a value read as off).
  EXPECT_FALSE(must_set_implicit_launch_order(value, 22600)) << "NCCL_LAUNCH_ORDER_IMPLICIT=" << value;

  // Eager: a gradient bucket and a statistics all-reduce submitted alternately, none waited for
  // before all are queued, as SyncBatchNorm's backward runs beside DDP's buckets.
  const int64_t bucket_n = 1 << 20, stats_n = 2 * 64;
  std::vector<Tensor> buckets, stats;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 4; ++k) {
    buckets.push_back(full({bucket_n}, (rank() + 1.0) * (k + 1), kFloat32, gpu_));
    works.push_back(gradients_->all_reduce(buckets.back(), CollectiveReduce::Sum));
    stats.push_back(full({stats_n}, rank() + 1.0 + k, kFloat64, gpu_));
    works.push_back(statistics_->all_reduce(stats.back(), CollectiveReduce::Sum));
  }
  for (const WorkPtr& w : works) w->wait();
  const double rank_sum = size() * (size() + 1) / 2.0;
  for (int k = 0; k < 4; ++k) {
    expect_all(buckets[k], static_cast<float>(rank_sum * (k + 1)), "bucket " + std::to_string(k));
    const std::vector<double> s = stats[k].to_vector<double>();
    EXPECT_EQ(s.front(), rank_sum + size() * k);
    EXPECT_EQ(s.back(), rank_sum + size() * k);
  }

  // One graph holding a collective of each group on independent branches; each replay queued
  // through both groups, as GraphedSteps::replay does.
  Tensor x = zeros({bucket_n}, kFloat32, gpu_);  // the graph's static input
  Tensor bucket = zeros({bucket_n}, kFloat32, gpu_), stat = zeros({stats_n}, kFloat32, gpu_);
  Tensor y;
  const uint64_t first_gradient = gradients_->log().next_sequence();
  const uint64_t first_statistic = statistics_->log().next_sequence();
  std::unique_ptr<DeviceGraph> graph = capture_graph(gpu_.backend(), [&] {
    bucket.copy_(mul(x, 2.0));
    WorkPtr a = gradients_->all_reduce(bucket, CollectiveReduce::Sum);
    stat.copy_(x.narrow(0, 0, stats_n));
    WorkPtr b = statistics_->all_reduce(stat, CollectiveReduce::Sum);
    b->wait();
    a->wait();
    y = add(bucket.narrow(0, 0, stats_n), stat);
  });
  EXPECT_EQ(gradients_->log().next_sequence() - first_gradient, 1u);
  EXPECT_EQ(statistics_->log().next_sequence() - first_statistic, 1u);
  for (int k = 0; k < 3; ++k) {
    gpu_.backend().fill(x, (rank() + 1.0) * (k + 1.0));
    statistics_->replay_graph([&] { gradients_->replay_graph([&] { graph->replay(); }, 1)->wait(); }, 1)->wait();
    // y = 2·Σ_r x_r + Σ_r x_r
    expect_all(y, static_cast<float>(3.0 * rank_sum * (k + 1)), "replay " + std::to_string(k));
  }
  gradients_->synchronize();
  statistics_->synchronize();
}

}  // namespace
}  // namespace dp
