// NcclProcessGroup on real GPUs, one per rank (run by mpirun with 1 and 2 ranks; every test skips,
// on every rank, where some rank has no GPU of its own — see nccl_test_main.cpp): each collective
// against the value computed on the host, every dtype, stream ordering in both directions (NOTE
// [ NCCL streams and waits ]), the log's sequence numbers, fingerprints and states, argument
// errors, agreement with the MPI backend, and a skipped collective ending in the watchdog's abort
// (NOTE [ NCCL errors and abort ]).
//
// Every rank runs each test; values are built from the rank so each result is checked exactly.
// Tests keep to EXPECT_* around collectives: an ASSERT returning early on one rank would leave the
// others waiting in a collective.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_process_group.h"
#include "comm/nccl/nccl_process_group.h"
#include "common/expect_error.h"
#include "nccl_test_environment.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

using testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Holds a stream at the point where it is created until open(): a host function queued there
// spins on a flag, so the work queued behind it waits and a test decides when the stream moves on.
// The host function frees the flag, so the gate may go before the stream reaches it.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : flag_(new std::atomic<bool>(false)) {
    const cudaError_t status = cudaLaunchHostFunc(stream, &StreamGate::hold, flag_);
    if (status != cudaSuccess) {
      delete flag_;
      flag_ = nullptr;
      ADD_FAILURE() << "cudaLaunchHostFunc: " << cudaGetErrorString(status);
    }
  }
  ~StreamGate() { open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void open() {
    if (flag_ != nullptr) flag_->store(true);
    flag_ = nullptr;  // the host function owns it from here
  }

 private:
  static void CUDART_CB hold(void* data) {
    auto* flag = static_cast<std::atomic<bool>*>(data);
    while (!flag->load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    delete flag;
  }
  std::atomic<bool>* flag_;
};

// Needs no GPU: runs everywhere, also where every other test skips.
TEST(NcclProcessGroupConstruction, RejectsADeviceThatIsNotAGpu) {
  Runtime runtime;
  // Thrown before any MPI call, so every rank throws alone and nobody waits.
  std::string message = error_of([&] { NcclProcessGroup on_cpu(testing::test_mpi(), runtime.cpu()); });
  EXPECT_TRUE(contains(message, "NcclProcessGroup: NCCL communicates between GPUs, got device cpu (use the MPI "
                                "backend for CPU tensors)"))
      << message;
  message = error_of([&] { NcclProcessGroup on_nothing(testing::test_mpi(), Device()); });
  EXPECT_TRUE(contains(message, "got device (no device)")) << message;
}

class NcclProcessGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::nccl_skip_reason().empty()) GTEST_SKIP() << testing::nccl_skip_reason();
    gpu_ = runtime_.cuda(testing::test_mpi().layout().local_rank);
    group_ = std::make_unique<NcclProcessGroup>(testing::test_mpi(), gpu_, options_);
  }

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  cuda::CudaBackend& gpu_backend() { return static_cast<cuda::CudaBackend&>(gpu_.backend()); }
  cudaStream_t compute_stream() { return gpu_backend().stream(); }

  // A 1-D tensor on this rank's GPU.
  template <typename T>
  Tensor on_gpu(const std::vector<T>& values) {
    return from_vector<T>(values, {static_cast<int64_t>(values.size())}, gpu_);
  }
  // 1 + 2 + ... + size
  double rank_sum() const { return size() * (size() + 1) / 2.0; }

  Runtime runtime_;  // declared first: its CUDA backend outlives the group
  Device cpu_ = runtime_.cpu();
  Device gpu_;
  NcclProcessGroupOptions options_;
  std::unique_ptr<NcclProcessGroup> group_;
};

TEST_F(NcclProcessGroupTest, RankAndSizeAreMpisWorld) {
  EXPECT_EQ(rank(), testing::test_mpi().layout().rank);
  EXPECT_EQ(size(), testing::test_mpi().layout().size);
  EXPECT_STREQ(group_->backend_name(), "nccl");
  EXPECT_TRUE(group_->device() == gpu_);
  EXPECT_NE(group_->communication_stream(), compute_stream());
}

// Gradient all-reduces are launched in the middle of backward: their stream has the device's
// highest priority, the compute stream the default one.
TEST_F(NcclProcessGroupTest, CommunicationStreamHasTheHighestPriority) {
  int least = 0, greatest = 0, comm = 0, compute = 0;
  ASSERT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  if (least == greatest) GTEST_SKIP() << "this GPU has a single stream priority (" << least << ")";
  ASSERT_EQ(cudaStreamGetPriority(group_->communication_stream(), &comm), cudaSuccess);
  ASSERT_EQ(cudaStreamGetPriority(compute_stream(), &compute), cudaSuccess);
  EXPECT_EQ(comm, greatest) << "priorities range from " << least << " (lowest) to " << greatest;
  EXPECT_LT(comm, compute) << "lower numbers are higher priorities";
}

TEST_F(NcclProcessGroupTest, AllReduceSumAndAverage) {
  // Rank r holds (r + 1) * (i + 1); odd length so no size divides it evenly.
  constexpr int64_t n = 1001;
  std::vector<float> f(n);
  std::vector<double> d(n);
  for (int64_t i = 0; i < n; ++i) f[i] = d[i] = (rank() + 1.0) * (i + 1.0);
  Tensor sum32 = on_gpu(f), avg32 = on_gpu(f), sum64 = on_gpu(d), avg64 = on_gpu(d);
  WorkPtr w1 = group_->all_reduce(sum32, CollectiveReduce::Sum);
  WorkPtr w2 = group_->all_reduce(avg32, CollectiveReduce::Average);
  WorkPtr w3 = group_->all_reduce(sum64, CollectiveReduce::Sum);
  WorkPtr w4 = group_->all_reduce(avg64, CollectiveReduce::Average);
  for (const WorkPtr& w : {w1, w2, w3, w4}) w->wait();
  // to_vector copies on the compute stream, which wait() ordered after the collectives.
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

TEST_F(NcclProcessGroupTest, AllReduceIntegers) {
  Tensor i32 = on_gpu(std::vector<int32_t>{rank(), -rank(), 1});
  Tensor i64 = on_gpu(std::vector<int64_t>{int64_t{1} << 40, rank()});
  group_->all_reduce(i32, CollectiveReduce::Sum)->wait();
  group_->all_reduce(i64, CollectiveReduce::Sum)->wait();
  const int32_t ranks = size() * (size() - 1) / 2;
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{ranks, -ranks, size()}));
  EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{size() * (int64_t{1} << 40), ranks}));
}

// Values chosen so every partial sum is exact in the 16-bit type (as in the MPI backend's test).
TEST_F(NcclProcessGroupTest, AllReduceHalfAndBFloat16) {
  for (DType dtype : {kFloat16, kBFloat16}) {
    const int64_t n = dtype == kFloat16 ? 64 : 16;
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = 0.5f * (rank() + 1) + 0.25f * i - 3.0f;
    Tensor sum = on_gpu(values).to(dtype);
    Tensor avg = on_gpu(std::vector<float>(n, rank() + 1.0f)).to(dtype);
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

TEST_F(NcclProcessGroupTest, BroadcastFromEveryRootInEveryDtype) {
  for (int root = 0; root < size(); ++root) {
    Tensor f = on_gpu(std::vector<float>{rank() * 10.0f, rank() + 0.5f});
    Tensor d = on_gpu(std::vector<double>{rank() / 3.0});
    Tensor h = on_gpu(std::vector<float>{rank() + 0.25f}).to(kFloat16);
    Tensor bf = on_gpu(std::vector<float>{rank() - 0.5f}).to(kBFloat16);
    Tensor i32 = on_gpu(std::vector<int32_t>{-rank()});
    Tensor i64 = on_gpu(std::vector<int64_t>{rank(), int64_t{rank()} << 33});
    Tensor u8 = on_gpu(std::vector<uint8_t>{static_cast<uint8_t>(200 + rank())});
    Tensor b = on_gpu(std::vector<uint8_t>{static_cast<uint8_t>(rank() == root), 1}).to(kBool);
    std::vector<WorkPtr> works;
    for (const Tensor* t : {&f, &d, &h, &bf, &i32, &i64, &u8, &b}) works.push_back(group_->broadcast(*t, root, root));
    works.back()->wait();
    for (const WorkPtr& w : works) w->wait();
    EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{root * 10.0f, root + 0.5f})) << "root " << root;
    EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{root / 3.0})) << "root " << root;
    EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{root + 0.25f})) << "root " << root;
    EXPECT_EQ(bf.to_vector<float>(), (std::vector<float>{root - 0.5f})) << "root " << root;
    EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{-root})) << "root " << root;
    EXPECT_EQ(i64.to_vector<int64_t>(), (std::vector<int64_t>{root, int64_t{root} << 33})) << "root " << root;
    EXPECT_EQ(u8.to_vector<uint8_t>(), (std::vector<uint8_t>{static_cast<uint8_t>(200 + root)})) << "root " << root;
    EXPECT_EQ(b.to_vector<bool>(), (std::vector<bool>{true, true})) << "root " << root;
  }
}

TEST_F(NcclProcessGroupTest, AllGatherInRankOrder) {
  const int64_t m = 3;
  Tensor input = on_gpu(std::vector<int32_t>{rank() * 100, rank() * 100 + 1, rank() * 100 + 2});
  Tensor output = zeros({size(), m}, kInt32, gpu_);
  group_->all_gather(input, output)->wait();
  std::vector<int32_t> expected;
  for (int r = 0; r < size(); ++r) {
    for (int j = 0; j < m; ++j) expected.push_back(r * 100 + j);
  }
  EXPECT_EQ(output.to_vector<int32_t>(), expected);

  // In place: the input is this rank's slot of the output.
  Tensor gathered = zeros({size() * m}, kFloat32, gpu_);
  Tensor slot = gathered.narrow(0, rank() * m, m);
  slot.copy_(on_gpu(std::vector<float>{rank() * 100.0f, rank() * 100.0f + 1, rank() * 100.0f + 2}));
  group_->all_gather(slot, gathered)->wait();
  EXPECT_EQ(gathered.to_vector<float>(), std::vector<float>(expected.begin(), expected.end()));

  // uint8 and bfloat16 travel as they are.
  Tensor bytes = on_gpu(std::vector<uint8_t>{static_cast<uint8_t>(rank()), 255});
  Tensor all_bytes = zeros({2 * size()}, kUInt8, gpu_);
  Tensor halves = on_gpu(std::vector<float>{rank() + 0.5f}).to(kBFloat16);
  Tensor all_halves = zeros({size()}, kBFloat16, gpu_);
  group_->all_gather(bytes, all_bytes);
  group_->all_gather(halves, all_halves)->wait();
  std::vector<uint8_t> want_bytes;
  std::vector<float> want_halves;
  for (int r = 0; r < size(); ++r) {
    want_bytes.insert(want_bytes.end(), {static_cast<uint8_t>(r), 255});
    want_halves.push_back(r + 0.5f);
  }
  EXPECT_EQ(all_bytes.to_vector<uint8_t>(), want_bytes);
  EXPECT_EQ(all_halves.to_vector<float>(), want_halves);
}

TEST_F(NcclProcessGroupTest, ReduceScatterSumAndAverage) {
  // Input element j on rank r is (r + 1) * j; rank r keeps chunk r of the sum.
  const int64_t m = 5;
  std::vector<double> values(static_cast<size_t>(size() * m));
  for (size_t j = 0; j < values.size(); ++j) values[j] = (rank() + 1.0) * j;
  Tensor input = on_gpu(values);
  Tensor sum = zeros({m}, kFloat64, gpu_), avg = zeros({m}, kFloat32, gpu_);
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

TEST_F(NcclProcessGroupTest, EmptyTensorsAreNoOps) {
  Tensor empty_f = zeros({0}, kFloat32, gpu_);
  Tensor empty_out = zeros({0}, kFloat32, gpu_);
  group_->all_reduce(empty_f, CollectiveReduce::Sum)->wait();
  group_->broadcast(empty_f, 0)->wait();
  group_->all_gather(empty_f, empty_out)->wait();
  group_->reduce_scatter(empty_f, empty_out, CollectiveReduce::Average)->wait();
  group_->synchronize();
  EXPECT_EQ(group_->log().next_sequence(), 4u);
}

// The barrier's wait() blocks the host, and the communication stream runs collectives in order:
// once it returns, everything submitted before it has run.
TEST_F(NcclProcessGroupTest, BarrierWaitsOnTheHostForEverythingBefore) {
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 8; ++k) {
    tensors.push_back(full({1 << 20}, k, kFloat32, gpu_));
    works.push_back(group_->all_reduce(tensors.back(), CollectiveReduce::Sum, k));
  }
  WorkPtr barrier = group_->barrier(/*tag=*/42);
  barrier->wait();
  EXPECT_TRUE(barrier->is_completed());
  for (const WorkPtr& w : works) EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(barrier->fingerprint().str(), "barrier(tag 42)");
  EXPECT_EQ(barrier->sequence(), works.back()->sequence() + 1);
}

// NOTE [ NCCL streams and waits ], both directions, made deterministic by holding the compute
// stream: (1) the collective reads what the compute stream wrote before the submission, though
// that write has not run when the collective is submitted; (2) wait() returns without blocking the
// host, and a copy queued on the compute stream after it reads the collective's result.
TEST_F(NcclProcessGroupTest, WaitOrdersTheComputeStreamWithoutBlockingTheHost) {
  constexpr int64_t n = int64_t(1) << 24;  // 64 MiB of float32
  Tensor input = zeros({n}, kFloat32, gpu_);
  Tensor output = zeros({size() * n}, kFloat32, gpu_);
  group_->all_gather(input, output)->wait();  // warm-up: NCCL sets up what it needs now
  group_->synchronize();
  gpu_backend().synchronize();

  Tensor copy = empty({size() * n}, kFloat32, gpu_);
  StreamGate gate(compute_stream());
  gpu_backend().fill(input, rank() + 7.0);  // queued behind the gate
  WorkPtr work = group_->all_gather(input, output);
  work->wait();
  EXPECT_FALSE(work->is_completed()) << "the collective ran before the compute stream reached it";
  gpu_backend().copy_on_device(copy.raw_data(), output.raw_data(), output.nbytes());
  gate.open();

  std::vector<float> got = copy.to_vector<float>();
  for (int r = 0; r < size(); ++r) {
    for (int64_t i : {int64_t(0), n / 2, n - 1}) {
      EXPECT_EQ(got[r * n + i], r + 7.0f) << "rank " << r << "'s chunk, element " << i;
    }
  }
  int64_t wrong = 0;
  for (int64_t k = 0; k < size() * n; ++k) wrong += got[k] != static_cast<float>(k / n + 7);
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(work->is_completed());
}

// synchronize() waits for the newest entry of each stream: a collective held back on the
// communication stream is still to run after a graph replay queued later on the compute stream
// (here a fill standing in for the graph) has run.
TEST_F(NcclProcessGroupTest, SynchronizeWaitsForCollectivesAndReplaysAlike) {
  Tensor t = zeros({16}, kFloat32, gpu_), u = zeros({16}, kFloat32, gpu_);
  group_->all_reduce(t, CollectiveReduce::Sum)->wait();  // warm-up
  group_->synchronize();
  StreamGate gate(group_->communication_stream());
  WorkPtr collective = group_->all_reduce(t, CollectiveReduce::Sum);  // queued behind the gate
  WorkPtr replay = group_->replay_graph([&] { gpu_backend().fill(u, 1.0); }, 0);
  gpu_backend().synchronize();  // the compute stream, with the replay, has run
  ASSERT_TRUE(replay->is_completed());
  ASSERT_FALSE(collective->is_completed()) << "the gate did not hold the communication stream";
  std::thread opener([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    gate.open();
  });
  const auto start = std::chrono::steady_clock::now();
  group_->synchronize();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  opener.join();
  EXPECT_TRUE(collective->is_completed());
  EXPECT_GE(waited, 0.2) << "synchronize() returned before the collective held on the communication stream had run";
}

// NCCL writes into tensors asynchronously: the group keeps them until the collective has run,
// even when the caller drops both the tensor and the Work at once, so the memory pool cannot hand
// their memory to a tensor allocated next (which NCCL would then overwrite).
TEST_F(NcclProcessGroupTest, DroppedTensorsStayAliveUntilTheCollectiveRuns) {
  constexpr int64_t n = int64_t(1) << 22;
  Tensor input = full({n}, 1.0, kFloat32, gpu_);
  {
    Tensor warm = empty({size() * n}, kFloat32, gpu_);
    group_->all_gather(input, warm)->wait();
    group_->synchronize();
  }
  Tensor next;
  {
    StreamGate gate(compute_stream());
    {
      Tensor dropped = empty({size() * n}, kFloat32, gpu_);
      group_->all_gather(input, dropped);  // Work dropped too
    }
    next = full({size() * n}, 5.0, kFloat32, gpu_);  // would reuse `dropped`'s block if it were freed
    gate.open();
  }
  group_->synchronize();
  std::vector<float> got = next.to_vector<float>();
  int64_t overwritten = 0;
  for (float v : got) overwritten += v != 5.0f;
  EXPECT_EQ(overwritten, 0);
}

// NOTE [ Freed on the submitting thread ]: a collective's tensor whose last handle the group
// holds outlives the collective until the submitting thread comes back (here synchronize()),
// however long the watchdog (polling every 100 ms at most) has known that it ran.
TEST_F(NcclProcessGroupTest, RetiredTensorsAreFreedOnTheSubmittingThreadNotTheWatchdogs) {
  constexpr int64_t n = int64_t(1) << 22;
  const Tensor input = full({n}, 1.0, kFloat32, gpu_);
  group_->synchronize();
  WorkPtr work;
  {
    Tensor dropped = empty({size() * n}, kFloat32, gpu_);  // the group's handle is the last one
    work = group_->all_gather(input, dropped);
  }
  dynamic_cast<NcclWork&>(*work).synchronize();
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the watchdog retires it meanwhile
  gpu_backend().synchronize();
  const size_t held = gpu_backend().pool_stats().used_bytes;
  group_->synchronize();
  gpu_backend().synchronize();
  const size_t after = gpu_backend().pool_stats().used_bytes;
  EXPECT_GE(held, after + static_cast<size_t>(size() * n) * sizeof(float))
      << "the watchdog's thread freed the retired collective's output (held " << held << " bytes, then " << after
      << ")";
}

TEST_F(NcclProcessGroupTest, LogRecordsSequenceFingerprintAndState) {
  Tensor a = on_gpu(std::vector<float>(10, 1.0f));
  WorkPtr w0 = group_->all_reduce(a, CollectiveReduce::Average, /*tag=*/0);
  WorkPtr w1 = group_->broadcast(a, size() - 1, /*tag=*/1);
  WorkPtr w2 = group_->barrier();
  Tensor out = empty({size() * 10}, kFloat32, gpu_);
  WorkPtr w3 = group_->all_gather(a, out, /*tag=*/2);
  group_->synchronize();

  std::vector<CollectiveRecord> records = group_->log().recent();
  ASSERT_EQ(records.size(), 4u);
  const WorkPtr works[] = {w0, w1, w2, w3};
  std::vector<int64_t> digests;
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(records[k].sequence, k);
    EXPECT_EQ(works[k]->sequence(), k);
    EXPECT_EQ(records[k].fingerprint, works[k]->fingerprint());
    EXPECT_EQ(records[k].state, CollectiveState::Completed) << records[k].fingerprint.str();
    EXPECT_TRUE(works[k]->is_completed());
    digests.push_back(static_cast<int64_t>(collective_digest(records[k].sequence, records[k].fingerprint)));
  }
  EXPECT_EQ(records[0].fingerprint.str(), "all_reduce(average, float32 x 10, tag 0)");
  EXPECT_EQ(records[1].fingerprint.str(), "broadcast(float32 x 10, root " + std::to_string(size() - 1) + ", tag 1)");
  EXPECT_EQ(records[2].fingerprint.str(), "barrier()");
  EXPECT_EQ(records[3].fingerprint.str(), "all_gather(float32 x 10, tag 2)");

  // Every rank logged the same: gathered through the group itself.
  Tensor mine = on_gpu(digests);
  Tensor everyone = empty({size(), 4}, kInt64, gpu_);
  group_->all_gather(mine, everyone)->wait();
  std::vector<int64_t> all = everyone.to_vector<int64_t>();
  for (int r = 0; r < size(); ++r) {
    EXPECT_EQ(std::vector<int64_t>(all.begin() + 4 * r, all.begin() + 4 * (r + 1)), digests) << "rank " << r;
  }
}

// 300 collectives of mixed kinds in flight at once: they complete in submission order (the
// completed ones are always a prefix) and each has its own correct result.
TEST_F(NcclProcessGroupTest, ManyAsyncCollectivesCompleteInOrder) {
  constexpr int kOps = 300;
  std::vector<Tensor> tensors, outputs;
  std::vector<WorkPtr> works;
  for (int k = 0; k < kOps; ++k) {
    const int64_t n = 1 + (k * 37) % 257;
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(k + i + rank());
    tensors.push_back(on_gpu(values));
    switch (k % 3) {
      case 0: works.push_back(group_->all_reduce(tensors.back(), CollectiveReduce::Sum, /*tag=*/k)); break;
      case 1: works.push_back(group_->broadcast(tensors.back(), k % size(), k)); break;
      case 2:
        outputs.push_back(empty({size() * n}, kFloat32, gpu_));
        works.push_back(group_->all_gather(tensors.back(), outputs.back(), k));
        break;
    }
  }
  bool newer_completed = false;
  for (int k = kOps - 1; k >= 0; --k) {
    const bool done = works[k]->is_completed();
    EXPECT_TRUE(done || !newer_completed) << "collective " << k << " not completed after a newer one";
    newer_completed = newer_completed || done;
  }
  for (int k = kOps - 1; k >= 0; --k) works[k]->wait();

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

// Errors a rank sees alone throw from the call, take no sequence number and leave the group usable.
TEST_F(NcclProcessGroupTest, BadArgumentsThrowAtSubmission) {
  Tensor matrix = zeros({2, 3}, kFloat32, gpu_);
  Tensor vec = zeros({4}, kFloat32, gpu_);
  const std::string here = "NcclProcessGroup::all_reduce on rank " + std::to_string(rank()) + " of " +
                           std::to_string(size());
  EXPECT_ERROR_CONTAINS(group_->all_reduce(zeros({4}, kFloat32, cpu_), CollectiveReduce::Sum),
                        here + ": the tensor float32[4] on cpu is not on a GPU; the NCCL backend communicates CUDA "
                               "tensors (use the MPI backend for CPU tensors)");
  EXPECT_ERROR_CONTAINS(group_->all_gather(vec, zeros({size() * 4}, kFloat32, cpu_)), "the output float32");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(matrix.t(), CollectiveReduce::Sum), "is not contiguous");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(Tensor(), CollectiveReduce::Sum), "the tensor is undefined");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(vec, CollectiveReduce::None),
                        "choose CollectiveReduce::Sum or CollectiveReduce::Average");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(zeros({4}, kInt32, gpu_), CollectiveReduce::Average),
                        "the average of an integer tensor is not an integer");
  EXPECT_ERROR_CONTAINS(group_->all_reduce(zeros({4}, kBool, gpu_), CollectiveReduce::Sum),
                        "uint8 and bool tensors cannot be reduced");
  EXPECT_ERROR_CONTAINS(group_->reduce_scatter(zeros({4 * size()}, kUInt8, gpu_), zeros({4}, kUInt8, gpu_),
                                               CollectiveReduce::Sum),
                        "uint8 and bool tensors cannot be reduced");
  EXPECT_ERROR_CONTAINS(group_->broadcast(vec, size()), "root " + std::to_string(size()) + " is not a rank");
  EXPECT_ERROR_CONTAINS(group_->broadcast(vec, -1), "root -1 is not a rank");
  EXPECT_ERROR_CONTAINS(group_->all_gather(vec, zeros({size() * 4 + 1}, kFloat32, gpu_)),
                        "must hold " + std::to_string(size()) + " x 4");
  EXPECT_ERROR_CONTAINS(group_->all_gather(vec, zeros({size() * 4}, kFloat64, gpu_)), "differ in dtype");
  Tensor gathered = zeros({size() * 4 + 1}, kFloat32, gpu_);
  EXPECT_ERROR_CONTAINS(group_->all_gather(gathered.narrow(0, 1, 4), gathered.narrow(0, 0, size() * 4)),
                        "input and output overlap");
  EXPECT_ERROR_CONTAINS(group_->reduce_scatter(vec, zeros({5}, kFloat32, gpu_), CollectiveReduce::Sum),
                        "must hold " + std::to_string(size()) + " x 5");
  Tensor scattered = zeros({size() * 4}, kFloat32, gpu_);
  EXPECT_ERROR_CONTAINS(group_->reduce_scatter(scattered, scattered.narrow(0, 0, 4), CollectiveReduce::Sum),
                        "input and output overlap");
  EXPECT_EQ(group_->log().next_sequence(), 0u);

  Tensor ok = on_gpu(std::vector<float>{1.0f});
  group_->all_reduce(ok, CollectiveReduce::Sum)->wait();
  EXPECT_EQ(ok.item<float>(), static_cast<float>(size()));
}

// Destroying a group waits for what was submitted (the other ranks expect it); the Works stay
// usable afterwards.
TEST_F(NcclProcessGroupTest, DestructionWaitsForPendingCollectives) {
  std::vector<Tensor> tensors;
  std::vector<WorkPtr> works;
  for (int k = 0; k < 20; ++k) {
    tensors.push_back(full({100}, k + 1.0, kFloat64, gpu_));
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

// The same all-reduces through NCCL (on the GPU) and through the MPI backend (on the host) give
// the same numbers: bit for bit where both add in one order (two ranks, and averages over a power
// of two), else within the rounding of a different summation order.
TEST_F(NcclProcessGroupTest, AllReduceMatchesTheMpiBackend) {
  MpiProcessGroup mpi_group(testing::test_mpi());
  const int64_t n = 4099;
  const bool same_order = size() <= 2;
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (CollectiveReduce op : {CollectiveReduce::Sum, CollectiveReduce::Average}) {
      std::vector<double> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = std::sin(0.37 * i + 1.3 * rank()) * (1 + i % 7);
      Tensor host = from_vector(values, {n}, cpu_).to(dtype);
      Tensor device = host.to(gpu_);
      WorkPtr on_mpi = mpi_group.all_reduce(host, op);
      WorkPtr on_nccl = group_->all_reduce(device, op);
      on_mpi->wait();
      on_nccl->wait();
      std::vector<double> want = host.to_vector<double>(), got = device.to_vector<double>();
      const double tolerance = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : 2e-2;
      int64_t mismatches = 0, first = -1;
      for (int64_t i = 0; i < n; ++i) {
        const bool ok = same_order ? got[i] == want[i]
                                   : std::abs(got[i] - want[i]) <= tolerance * (1 + std::abs(want[i]));
        if (!ok && mismatches++ == 0) first = i;
      }
      EXPECT_EQ(mismatches, 0) << dtype_name(dtype) << " " << collective_reduce_name(op) << ", first at " << first
                               << (first >= 0 ? ": NCCL " + std::to_string(got[first]) + ", MPI " +
                                                    std::to_string(want[first])
                                              : std::string());
    }
  }
}

// A rank that skips a collective leaves the others waiting in it: their watchdog aborts the
// communicator after the timeout, and the collective fails naming this rank, its sequence number
// and fingerprint; the group stays broken.
class NcclWatchdogTest : public NcclProcessGroupTest {
 protected:
  NcclWatchdogTest() { options_.timeout = std::chrono::seconds(3); }
};

TEST_F(NcclWatchdogTest, ASkippedCollectiveTimesOutAndBreaksTheGroup) {
  if (size() == 1) GTEST_SKIP() << "needs two ranks: one skips a collective the other waits in";
  Tensor t = on_gpu(std::vector<float>(8, 1.0f));
  group_->all_reduce(t, CollectiveReduce::Sum, /*tag=*/6)->wait();
  group_->synchronize();
  if (rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    WorkPtr work = group_->all_reduce(t, CollectiveReduce::Sum, /*tag=*/7);
    auto* nccl_work = dynamic_cast<NcclWork*>(work.get());
    EXPECT_NE(nccl_work, nullptr);
    const std::string message = error_of([&] { nccl_work ? nccl_work->synchronize() : work->wait(); });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(contains(message, "NCCL process group, rank 0 of " + std::to_string(size()) +
                                      ", collective #1 all_reduce(sum, float32 x 8, tag 7): has not completed after"))
        << message;
    EXPECT_TRUE(contains(message, "(timeout 3.0 s); the NCCL communicator was aborted")) << message;
    EXPECT_GE(waited, 2.9);
    EXPECT_LT(waited, 30.0);
    EXPECT_TRUE(work->is_completed());
    EXPECT_ERROR_CONTAINS(work->wait(), "collective #1 all_reduce");
    EXPECT_EQ(group_->log().find(1)->state, CollectiveState::Failed);

    WorkPtr after = group_->barrier();
    EXPECT_TRUE(after->is_completed());
    EXPECT_ERROR_CONTAINS(after->wait(), "collective #2 barrier(): not run, the group is broken by an earlier "
                                         "failure: NCCL process group, rank 0");
    EXPECT_ERROR_CONTAINS(group_->synchronize(), "has not completed after");
  }
  // Rank 1 stays alive meanwhile (a peer that went away could give rank 0 an asynchronous error
  // instead of the timeout); then its group's destruction ends too, finalising against an
  // aborted peer at worst until the timeout, then aborting.
  MPI_Barrier(testing::test_mpi().world_comm());
}

// NOTE [ The watchdog never waits for a launch ]: behind a hung collective the training thread's
// next launch blocks (CUDA's queue is full); the watchdog must still time the hang out and abort,
// which is what unblocks that launch. Here a replay hangs (a gate holds the compute stream inside
// it; a helper opens it after 8 s, in case aborting waits for the device) and the next replay's
// launch blocks on the host until the test sees the hung one fail — or for 20 s, which is what
// happens when the watchdog waits for the launch (the hung replay then ends when the gate opens,
// without failing). Every rank runs it alone: no collective crosses ranks.
TEST_F(NcclWatchdogTest, AReplayBlockedInItsLaunchDoesNotHoldTheWatchdogBack) {
  using Clock = std::chrono::steady_clock;
  using std::chrono::milliseconds;
  std::unique_ptr<StreamGate> gate;
  WorkPtr hung = group_->replay_graph([&] { gate = std::make_unique<StreamGate>(compute_stream()); }, 0, /*tag=*/1);
  if (gate == nullptr) {  // no ASSERT: the other ranks would wait in the barrier below
    ADD_FAILURE() << "replay_graph did not call the launch";
    MPI_Barrier(testing::test_mpi().world_comm());
    return;
  }
  const Clock::time_point start = Clock::now();
  std::atomic<bool> in_launch{false}, launcher_done{false}, release{false}, gave_up{false};
  std::thread opener([&] {
    while (!release && Clock::now() - start < std::chrono::seconds(8)) std::this_thread::sleep_for(milliseconds(1));
    gate->open();
  });
  WorkPtr blocked;
  std::thread launcher([&] {
    blocked = group_->replay_graph(
        [&] {
          in_launch = true;
          while (!release && Clock::now() - start < std::chrono::seconds(20))
            std::this_thread::sleep_for(milliseconds(1));
          gave_up = !release;
        },
        0, /*tag=*/2);
    launcher_done = true;
  });
  while (!in_launch && !launcher_done) std::this_thread::sleep_for(milliseconds(1));
  EXPECT_TRUE(in_launch) << "the second replay never reached its launch";
  while (!hung->is_completed() && Clock::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(milliseconds(10));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  release = true;
  launcher.join();
  opener.join();
  EXPECT_FALSE(gave_up) << "the hung replay ended only after the blocked launch gave up (" << waited << " s)";
  EXPECT_LT(waited, 15.0);
  const std::string prefix = "NCCL process group, rank " + std::to_string(rank()) + " of " + std::to_string(size());
  EXPECT_ERROR_CONTAINS(hung->wait(), prefix + ", collective #0 graph_replay(0 collectives, tag 1): has not "
                                               "completed after");
  if (blocked != nullptr) {
    EXPECT_TRUE(blocked->is_completed());
    EXPECT_ERROR_CONTAINS(blocked->wait(), prefix + ", collective #1 graph_replay(0 collectives, tag 2): not "
                                                    "completed, the group was broken while it waited: " + prefix);
  }
  EXPECT_ERROR_CONTAINS(group_->synchronize(), "has not completed after");
  MPI_Barrier(testing::test_mpi().world_comm());
}

}  // namespace
}  // namespace dp
