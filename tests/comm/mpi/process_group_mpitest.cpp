// MpiProcessGroup across real ranks (run by mpirun with 1, 2 and 4 ranks): results of every
// collective, ordering of many asynchronous collectives, sequence/fingerprint agreement, and the
// error paths (ranks disagreeing, bad arguments, MPI's own errors).
//
// Every rank runs each test; values are built from the rank so each result is checked exactly.
// Tests keep to EXPECT_* around collectives: an ASSERT returning early on one rank would leave the
// others waiting in a collective.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_process_group.h"
#include "common/expect_error.h"
#include "mpi_test_environment.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

class MpiProcessGroupTest : public ::testing::Test {
 protected:
  MpiProcessGroupTest() : group_(std::make_unique<MpiProcessGroup>(testing::test_mpi())) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  template <typename T>
  Tensor tensor(const std::vector<T>& values) {
    return from_vector<T>(values, {static_cast<int64_t>(values.size())}, cpu_);
  }
  // 1 + 2 + ... + size
  double rank_sum() const { return size() * (size() + 1) / 2.0; }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;
};

TEST_F(MpiProcessGroupTest, RankAndSizeAreMpisWorld) {
  EXPECT_EQ(rank(), testing::test_mpi().layout().rank);
  EXPECT_EQ(size(), testing::test_mpi().layout().size);
  EXPECT_STREQ(group_->backend_name(), "mpi");
}

// NOTE [ Collectives in CUDA graphs ]: only NCCL records collectives into graphs; the MPI backend
// refuses a replay without running the launch, and logs nothing.
TEST_F(MpiProcessGroupTest, CudaGraphReplaysAreRefused) {
  EXPECT_FALSE(group_->captures_collectives());
  bool launched = false;
  const uint64_t next = group_->log().next_sequence();
  EXPECT_ERROR_CONTAINS(group_->replay_graph([&] { launched = true; }, 3),
                        "the mpi process group cannot hold collectives in a CUDA graph (3 were asked for a replay)");
  EXPECT_FALSE(launched);
  EXPECT_EQ(group_->log().next_sequence(), next);
}

TEST_F(MpiProcessGroupTest, AllReduceSumAndAverage) {
  // Rank r holds (r + 1) * (i + 1); odd length so no size divides it evenly.
  constexpr int64_t n = 1001;
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (int64_t i = 0; i < n; ++i) f[i] = d[i] = (rank() + 1.0) * (i + 1.0);
  Tensor sum32 = tensor(f), avg32 = tensor(f), sum64 = tensor(d), avg64 = tensor(d);
  WorkPtr w1 = group_->all_reduce(sum32, CollectiveReduce::Sum);
  WorkPtr w2 = group_->all_reduce(avg32, CollectiveReduce::Average);
  WorkPtr w3 = group_->all_reduce(sum64, CollectiveReduce::Sum);
  WorkPtr w4 = group_->all_reduce(avg64, CollectiveReduce::Average);
  for (const WorkPtr& w : {w1, w2, w3, w4}) w->wait();
  std::vector<float> s32 = sum32.to_vector<float>(), a32 = avg32.to_vector<float>();
  std::vector<double> s64 = sum64.to_vector<double>(), a64 = avg64.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const double sum = rank_sum() * (i + 1.0);
    EXPECT_EQ(s32[i], static_cast<float>(sum)) << "at " << i;
    EXPECT_EQ(s64[i], sum) << "at " << i;
    EXPECT_FLOAT_EQ(a32[i], static_cast<float>(sum / size())) << "at " << i;
    EXPECT_DOUBLE_EQ(a64[i], sum / size()) << "at " << i;
  }
}

TEST_F(MpiProcessGroupTest, AllReduceIntegers) {
  Tensor i32 = tensor(std::vector<int32_t>{rank(), -rank(), 1});
  Tensor i64 = tensor(std::vector<int64_t>{int64_t{1} << 40, rank()});
  group_->all_reduce(i32, CollectiveReduce::Sum)->wait();
  group_->all_reduce(i64, CollectiveReduce::Sum)->wait();
  const int32_t ranks = size() * (size() - 1) / 2;
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{ranks, -ranks, size()}));
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{size() * (int64_t{1} << 40), ranks}));
}

// NOTE [ 16-bit sums over MPI ]: values chosen so every partial sum is exact in the 16-bit type,
// so the expected results are exact too.
TEST_F(MpiProcessGroupTest, AllReduceHalfAndBFloat16) {
  for (DType dtype : {kFloat16, kBFloat16}) {
    const int64_t n = dtype == kFloat16 ? 64 : 16;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = 0.5f * (rank() + 1) + 0.25f * i - 3.0f;
    Tensor sum = tensor(values).to(dtype);
    Tensor avg = tensor(std::vector<float>(n, rank() + 1.0f)).to(dtype);
    group_->all_reduce(sum, CollectiveReduce::Sum)->wait();
    group_->all_reduce(avg, CollectiveReduce::Average)->wait();
    EXPECT_EQ(sum.dtype(), dtype);
    std::vector<float> got = sum.to_vector<float>(), got_avg = avg.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i], 0.5f * rank_sum() + size() * (0.25f * i - 3.0f)) << dtype_name(dtype) << " at " << i;
      EXPECT_EQ(got_avg[i], (size() + 1) / 2.0f) << dtype_name(dtype) << " at " << i;
    }
  }
}

// A sum that must round in float16: 1 + 2^-10 (the next float16 after 1) from every rank; the
// sums 2 + 2^-9, 3 + 3·2^-10, ... are checked against float32 rounded the same way, pairwise.
TEST_F(MpiProcessGroupTest, HalfSumRoundsLikeFloat16) {
  const float one_ulp_above_one = 1.0f + 1.0f / 1024;
  Tensor t = tensor(std::vector<float>{one_ulp_above_one, 65504.0f}).to(kFloat16);
  group_->all_reduce(t, CollectiveReduce::Sum)->wait();
  std::vector<float> got = t.to_vector<float>();
  // Rounded each step to float16 (11 significant bits) in some pairwise order; for 2 ranks it is
  // one rounding of 2 + 2^-9 (exact). For more, any order gives |error| <= size ulp of the sum.
  const float exact = size() * one_ulp_above_one;
  EXPECT_NEAR(got[0], exact, size() * 1.0f / 256) << "size " << size();
  if (size() == 2) {
    EXPECT_EQ(got[0], exact);
  }
  // 65504 is float16's largest finite value: two of them overflow to infinity, as in float16.
  if (size() > 1) {
    EXPECT_TRUE(std::isinf(got[1]));
  } else {
    EXPECT_EQ(got[1], 65504.0f);
  }
}

TEST_F(MpiProcessGroupTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < size(); ++root) {
    Tensor f = tensor(std::vector<float>{rank() * 10.0f, rank() + 0.5f});
    Tensor i = tensor(std::vector<int64_t>{rank(), int64_t{rank()} << 33});
    Tensor b = tensor(std::vector<uint8_t>{static_cast<uint8_t>(rank() == root), 7}).to(kBool);
    WorkPtr wf = group_->broadcast(f, root);
    WorkPtr wi = group_->broadcast(i, root, /*tag=*/root);
    WorkPtr wb = group_->broadcast(b, root);
    wb->wait();  // waiting on the last one completes the earlier ones too (submission order)
    EXPECT_TRUE(wf->is_completed());
    EXPECT_TRUE(wi->is_completed());
    wf->wait();
    wi->wait();
    EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{root * 10.0f, root + 0.5f})) << "root " << root;
    EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{root, int64_t{root} << 33})) << "root " << root;
    EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, true})) << "root " << root;
  }
}

TEST_F(MpiProcessGroupTest, AllGatherInRankOrder) {
  const int64_t m = 3;
  Tensor input = tensor(std::vector<int32_t>{rank() * 100, rank() * 100 + 1, rank() * 100 + 2});
  Tensor output = zeros({size(), m}, kInt32, cpu_);
  group_->all_gather(input, output)->wait();
  std::vector<int32_t> expected;
  for (int r = 0; r < size(); ++r) {
    for (int j = 0; j < m; ++j) expected.push_back(r * 100 + j);
  }
  EXPECT_EQ(output.to_vector<int32_t>(), expected);

  // In place: the input is this rank's slot of the output.
  Tensor gathered = zeros({size() * m}, kFloat32, cpu_);
  Tensor slot = gathered.narrow(0, rank() * m, m);
  slot.copy_(tensor(std::vector<float>{rank() * 100.0f, rank() * 100.0f + 1, rank() * 100.0f + 2}));
  group_->all_gather(slot, gathered)->wait();
  std::vector<float> expected_f(expected.begin(), expected.end());
  EXPECT_EQ(gathered.to_vector<float>(), expected_f);
}

TEST_F(MpiProcessGroupTest, ReduceScatterSumAndAverage) {
  // Input element j on rank r is (r + 1) * j; rank r keeps chunk r of the sum.
  const int64_t m = 5;
  std::vector<double> values(static_cast<size_t>(size() * m));
  for (size_t j = 0; j < values.size(); ++j) values[j] = (rank() + 1.0) * j;
  Tensor input = tensor(values);
  Tensor sum = zeros({m}, kFloat64, cpu_), avg = zeros({m}, kFloat32, cpu_);
  WorkPtr ws = group_->reduce_scatter(input, sum, CollectiveReduce::Sum);
  WorkPtr wa = group_->reduce_scatter(input.to(kFloat32), avg, CollectiveReduce::Average);
  ws->wait();
  wa->wait();
  std::vector<double> got = sum.to_vector<double>();
  std::vector<float> got_avg = avg.to_vector<float>();
  for (int64_t i = 0; i < m; ++i) {
    const double j = static_cast<double>(rank() * m + i);
    EXPECT_EQ(got[i], rank_sum() * j) << "at " << i;
    EXPECT_FLOAT_EQ(got_avg[i], static_cast<float>(rank_sum() * j / size())) << "at " << i;
  }
  EXPECT_EQ(input.to_vector<double>(), values);  // the input is left as it was
}

TEST_F(MpiProcessGroupTest, BarrierCompletes) {
  WorkPtr first = group_->barrier();
  WorkPtr tagged = group_->barrier(/*tag=*/42);
  tagged->wait();
  EXPECT_TRUE(first->is_completed());
  EXPECT_EQ(tagged->fingerprint().tag, 42);
  EXPECT_EQ(tagged->sequence(), first->sequence() + 1);
}

// 300 collectives of mixed kinds in flight at once: they complete in submission order (the
// completed ones are always a prefix) and each has its own correct result.
TEST_F(MpiProcessGroupTest, ManyAsyncCollectivesCompleteInOrder) {
  constexpr int kOps = 300;
  std::vector<Tensor> tensors, outputs;
  std::vector<WorkPtr> works;
  for (int k = 0; k < kOps; ++k) {
    const int64_t n = 1 + (k * 37) % 257;
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(k + i + rank());
    tensors.push_back(tensor(values));
    switch (k % 3) {
      case 0: works.push_back(group_->all_reduce(tensors.back(), CollectiveReduce::Sum, /*tag=*/k)); break;
      case 1: works.push_back(group_->broadcast(tensors.back(), k % size(), k)); break;
      case 2:
        outputs.push_back(empty({size() * n}, kFloat32, cpu_));
        works.push_back(group_->all_gather(tensors.back(), outputs.back(), k));
        break;
    }
  }
  // Scanning from the newest down: once one is seen completed, every older one must be too.
  bool newer_completed = false;
  for (int k = kOps - 1; k >= 0; --k) {
    const bool done = works[k]->is_completed();
    EXPECT_TRUE(done || !newer_completed) << "collective " << k << " not completed after a newer one";
    newer_completed = newer_completed || done;
  }
  for (int k = kOps - 1; k >= 0; --k) works[k]->wait();  // newest first: waits on all of them

  size_t gathered = 0;
  for (int k = 0; k < kOps; ++k) {
    EXPECT_EQ(works[k]->sequence(), static_cast<uint64_t>(k));
    EXPECT_EQ(works[k]->fingerprint().tag, k);
    std::vector<float> got = (k % 3 == 2 ? outputs[gathered++] : tensors[k]).to_vector<float>();
    const int64_t n = 1 + (k * 37) % 257;
    for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
      float expected = 0;
      if (k % 3 == 0) expected = static_cast<float>(size() * (k + i) + size() * (size() - 1) / 2);
      if (k % 3 == 1) expected = static_cast<float>(k + i + k % size());
      if (k % 3 == 2) expected = static_cast<float>(k + i % n + i / n);
      if (got[i] != expected) {
        ADD_FAILURE() << "collective " << k << " (" << works[k]->fingerprint().str() << ") element " << i
                      << ": got " << got[i] << ", expected " << expected;
        break;
      }
    }
  }
}

// Each rank's log of (sequence, fingerprint) is the same as every other rank's: checked by
// gathering the digests of each rank's log through the group itself.
TEST_F(MpiProcessGroupTest, LogsAgreeAcrossRanks) {
  Tensor a = tensor(std::vector<float>(10, 1.0f));
  group_->all_reduce(a, CollectiveReduce::Average, /*tag=*/0);
  group_->broadcast(a, size() - 1, /*tag=*/1);
  group_->barrier();
  Tensor out = empty({size() * 10}, kFloat32, cpu_);
  group_->all_gather(a, out, /*tag=*/2)->wait();

  std::vector<CollectiveRecord> records = group_->log().recent();
  ASSERT_EQ(records.size(), 4u);
  std::vector<int64_t> digests;
  for (const CollectiveRecord& r : records) {
    EXPECT_EQ(r.state, CollectiveState::Completed) << r.fingerprint.str();
    digests.push_back(static_cast<int64_t>(collective_digest(r.sequence, r.fingerprint)));
  }
  EXPECT_EQ(records[1].fingerprint.str(), "broadcast(float32 x 10, root " + std::to_string(size() - 1) + ", tag 1)");
  Tensor mine = tensor(digests);
  Tensor everyone = empty({size(), 4}, kInt64, cpu_);
  group_->all_gather(mine, everyone)->wait();
  std::vector<int64_t> all = everyone.to_vector<int64_t>();
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(std::vector<int64_t>(all.begin() + 4 * r, all.begin() + 4 * (r + 1)), digests) << "rank " << r;
  }
}

// Mismatched tensor sizes: a dp::Error on every rank naming each rank's collective, the tensor
// untouched, and the group broken afterwards — not a crash, a hang or a silent truncation.
TEST_F(MpiProcessGroupTest, MismatchedSizesFailOnEveryRank) {
  if (size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  Tensor t = tensor(std::vector<float>(static_cast<size_t>(4 + rank()), 1.0f));
  WorkPtr work = group_->all_reduce(t, CollectiveReduce::Sum, /*tag=*/7);
  std::string message = testing::error_of([&] { work->wait(); });
  EXPECT_NE(message.find("rank " + std::to_string(rank()) + " of " + std::to_string(size()) +
                         ", collective #0 all_reduce(sum, float32 x " + std::to_string(4 + rank()) + ", tag 7)"),
            std::string::npos) << message;
  EXPECT_NE(message.find("ranks disagree on the next collective"), std::string::npos) << message;
  for (int r = 0; r < size(); ++r) {
    const std::string line = "rank " + std::to_string(r) + ": #0 all_reduce(sum, float32 x " + std::to_string(4 + r) + ", tag 7)";
    EXPECT_NE(message.find(line), std::string::npos) << "missing '" << line << "' in: " << message;
  }
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(static_cast<size_t>(4 + rank()), 1.0f));
  EXPECT_EQ(group_->log().find(0)->state, CollectiveState::Failed);

  WorkPtr after = group_->barrier();
  std::string later = testing::error_of([&] { after->wait(); });
  EXPECT_NE(later.find("collective #1 barrier(): not run, the group is broken by an earlier failure"),
            std::string::npos) << later;
  EXPECT_NE(later.find("ranks disagree"), std::string::npos) << later;
}

TEST_F(MpiProcessGroupTest, DifferentCollectivesAreADesync) {
  if (size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  Tensor t = tensor(std::vector<float>(8, 1.0f));
  Tensor out = empty({size() * 8}, kFloat32, cpu_);
  WorkPtr work = rank() == 0 ? group_->broadcast(t, 0, /*tag=*/3) : group_->all_gather(t, out, /*tag=*/3);
  std::string message = testing::error_of([&] { work->wait(); });
  EXPECT_NE(message.find("rank 0: #0 broadcast(float32 x 8, root 0, tag 3)"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1: #0 all_gather(float32 x 8, tag 3)"), std::string::npos) << message;
  EXPECT_NE(message.find("<- this rank"), std::string::npos) << message;
}

TEST_F(MpiProcessGroupTest, DifferentBucketTagsAreADesync) {
  if (size() == 1) GTEST_SKIP() << "needs two ranks to disagree";
  Tensor t = tensor(std::vector<float>(8, 1.0f));
  WorkPtr work = group_->all_reduce(t, CollectiveReduce::Sum, /*tag=*/rank() == 0 ? 1 : 2);
  EXPECT_ERROR_CONTAINS(work->wait(), "rank 0: #0 all_reduce(sum, float32 x 8, tag 1)");
}

// Errors a rank sees alone throw from the call, take no sequence number and leave the group usable.
TEST_F(MpiProcessGroupTest, BadArgumentsThrowAtSubmission) {
  Tensor matrix = zeros({2, 3}, kFloat32, cpu_);
  Tensor vec = zeros({4}, kFloat32, cpu_);
  EXPECT_ERROR_CONTAINS(group_->all_reduce(matrix.t(), CollectiveReduce::Sum), "is not contiguous");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(Tensor(), CollectiveReduce::Sum), "the tensor is undefined");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(vec, CollectiveReduce::None), "choose CollectiveReduce::Sum or CollectiveReduce::Average");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(zeros({4}, kInt32, cpu_), CollectiveReduce::Average),
                        "the average of an integer tensor is not an integer");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(zeros({4}, kBool, cpu_), CollectiveReduce::Sum),
                        "uint8 and bool tensors cannot be reduced");
  EXPECT_ERROR_CONTAINS(group_->broadcast(vec, size()),
                        "MpiProcessGroup::broadcast on rank " + std::to_string(rank()) + " of " +
                            std::to_string(size()) + ": root " + std::to_string(size()) + " is not a rank");
  EXPECT_ERROR_CONTAINS(group_->broadcast(vec, -1), "root -1 is not a rank");
  EXPECT_ERROR_CONTAINS(group_->all_gather(vec, zeros({size() * 4 + 1}, kFloat32, cpu_)),
                        "must hold " + std::to_string(size()) + " x 4");
  EXPECT_ERROR_CONTAINS(group_->all_gather(vec, zeros({size() * 4}, kFloat64, cpu_)), "differ in dtype");
  Tensor gathered = zeros({size() * 4 + 1}, kFloat32, cpu_);
  EXPECT_ERROR_CONTAINS(group_->all_gather(gathered.narrow(0, 1, 4), gathered.narrow(0, 0, size() * 4)),
                        "input and output overlap");
  EXPECT_ERROR_CONTAINS(group_->reduce_scatter(vec, zeros({5}, kFloat32, cpu_), CollectiveReduce::Sum),
                        "must hold " + std::to_string(size()) + " x 5");
  Tensor scattered = zeros({size() * 4}, kFloat32, cpu_);
  EXPECT_ERROR_CONTAINS(group_->reduce_scatter(scattered, scattered.narrow(0, 0, 4), CollectiveReduce::Sum),
                        "input and output overlap");
  EXPECT_EQ(group_->log().next_sequence(), 0u);

  Tensor ok = tensor(std::vector<float>{1.0f});
  group_->all_reduce(ok, CollectiveReduce::Sum)->wait();
  EXPECT_EQ(ok.item<float>(), static_cast<float>(size()));
}

// MPI's own errors come back as dp::Error with MPI's description, thanks to MPI_ERRORS_RETURN.
TEST_F(MpiProcessGroupTest, MpiErrorsCarryMpisDescription) {
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(testing::test_mpi().world_comm(), &comm), "MPI_Comm_dup");
  float value = 0;
  const int rc = MPI_Bcast(&value, 1, MPI_FLOAT, /*root=*/size(), comm);  // no such root
  std::string message = testing::error_of([&] { check_mpi(rc, "MPI_Bcast", "broadcast test on rank ", rank()); });
  check_mpi(MPI_Comm_free(&comm), "MPI_Comm_free");
  EXPECT_NE(rc, MPI_SUCCESS);
  EXPECT_NE(message.find("broadcast test on rank " + std::to_string(rank()) + ": MPI_Bcast failed: "),
            std::string::npos) << message;
  EXPECT_NE(message.find("MPI_ERR_ROOT"), std::string::npos) << message;
  EXPECT_NE(message.find(mpi_error_text(rc)), std::string::npos) << message;
}

// Destroying a group runs what was submitted (the other ranks expect it) before stopping.
TEST_F(MpiProcessGroupTest, DestructionRunsPendingCollectives) {
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 20; ++k) {
    tensors.push_back(tensor(std::vector<double>(100, k + 1.0)));
    works.push_back(group_->all_reduce(tensors.back(), CollectiveReduce::Sum));
  }
  const int ranks = size();
  group_.reset();
  for (int k = 0; k < 20; ++k) {
    EXPECT_TRUE(works[k]->is_completed());
    works[k]->wait();
    EXPECT_EQ(tensors[k].to_vector<double>(), std::vector<double>(100, ranks * (k + 1.0))) << "collective " << k;
  }
}

// Two groups, each with its own communicator and thread, interleaved: no cross-talk.
TEST_F(MpiProcessGroupTest, TwoGroupsRunSideBySide) {
  if (testing::test_mpi().thread_level() < MPI_THREAD_MULTIPLE) GTEST_SKIP() << "MPI lacks MPI_THREAD_MULTIPLE";
  MpiProcessGroup second(testing::test_mpi());
  std::vector<Tensor> ones, twos;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 50; ++k) {
    ones.push_back(tensor(std::vector<float>(64, 1.0f)));
    twos.push_back(tensor(std::vector<float>(64, 2.0f)));
    works.push_back(group_->all_reduce(ones.back(), CollectiveReduce::Sum, k));
    works.push_back(second.all_reduce(twos.back(), CollectiveReduce::Average, k));
  }
  for (const WorkPtr& w : works) w->wait();
  for (int k = 0; k < 50; ++k) {
    EXPECT_EQ(ones[k].to_vector<float>(), std::vector<float>(64, static_cast<float>(size())));
    EXPECT_EQ(twos[k].to_vector<float>(), std::vector<float>(64, 2.0f));
  }
  EXPECT_EQ(second.log().next_sequence(), 50u);
}

// The watchdog (NOTE [ MPI watchdog ]) times a collective while it runs: neither idle time between
// collectives nor a rank that is late but within the timeout sets it off. Its firing path aborts
// the job, so that is tested by tests/comm/fault (ctest -R comm_fault).
TEST_F(MpiProcessGroupTest, WatchdogIgnoresIdleTimeAndLateButTimelyRanks) {
  using namespace std::chrono_literals;
  group_.reset();  // one group at a time, should MPI lack MPI_THREAD_MULTIPLE
  MpiProcessGroup watched(testing::test_mpi(), {.watchdog_timeout = 1000ms});
  Tensor t = tensor(std::vector<float>{1.0f});
  std::this_thread::sleep_for(1500ms);  // nothing submitted, longer than the timeout
  for (int k = 0; k < 3; ++k) {
    if (watched.rank() == 0) std::this_thread::sleep_for(200ms);  // the others wait inside MPI
    watched.all_reduce(t, CollectiveReduce::Sum)->wait();
  }
  const float n = static_cast<float>(watched.size());
  EXPECT_EQ(t.item<float>(), n * n * n);
}

// The barrier after a checkpoint write (kCheckpointWaitTag) is timed by checkpoint_wait_timeout:
// rank 0 "writing" longer than the collectives' timeout does not set the watchdog off (its firing
// path for this barrier: comm_fault.slow_save).
TEST_F(MpiProcessGroupTest, WatchdogGivesTheCheckpointWaitItsOwnTimeout) {
  using namespace std::chrono_literals;
  group_.reset();  // one group at a time, should MPI lack MPI_THREAD_MULTIPLE
  MpiProcessGroup watched(testing::test_mpi(), {.watchdog_timeout = 1000ms, .checkpoint_wait_timeout = 20000ms});
  if (watched.rank() == 0) std::this_thread::sleep_for(2500ms);  // the others wait inside MPI
  watched.barrier(kCheckpointWaitTag)->wait();
  Tensor t = tensor(std::vector<float>{1.0f});
  watched.all_reduce(t, CollectiveReduce::Sum)->wait();
  EXPECT_EQ(t.item<float>(), static_cast<float>(watched.size()));
  EXPECT_ERROR_CONTAINS(MpiProcessGroup(testing::test_mpi(), {.checkpoint_wait_timeout = -1ms}),
                        "checkpoint_wait_timeout must be positive, or zero for no limit (got -1 ms)");
}

TEST_F(MpiProcessGroupTest, NegativeWatchdogTimeoutIsRefused) {
  const MpiProcessGroupOptions negative{.watchdog_timeout = std::chrono::milliseconds(-1)};
  EXPECT_ERROR_CONTAINS(MpiProcessGroup(testing::test_mpi(), negative),
                        "watchdog_timeout must be positive, or zero to disable the watchdog (got -1 ms)");
  MpiProcessGroup unwatched(testing::test_mpi(), {.watchdog_timeout = std::chrono::milliseconds(0)});
  Tensor t = tensor(std::vector<float>{1.0f});
  unwatched.all_reduce(t, CollectiveReduce::Sum)->wait();
  EXPECT_EQ(t.item<float>(), static_cast<float>(unwatched.size()));
}

}  // namespace
}  // namespace dp
