#include "comm/nccl/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "comm/mpi/mpi_check.h"
#include "comm/nccl/nccl_check.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/ops/creation.h"

namespace dp {

using Clock = std::chrono::steady_clock;

namespace {

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::UInt8: case DType::Bool: return ncclUint8;  // bool: moved, never reduced
  }
  throw Error(detail::concat("NCCL process group: no NCCL type for dtype ", static_cast<int>(dtype)));
}

ncclRedOp_t nccl_reduce_op(CollectiveReduce op) {
  return op == CollectiveReduce::Average ? ncclAvg : ncclSum;
}

const char* nccl_call_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce: return "ncclAllReduce";
    case CollectiveOp::Broadcast: return "ncclBroadcast";
    case CollectiveOp::AllGather: return "ncclAllGather";
    case CollectiveOp::ReduceScatter: return "ncclReduceScatter";
    case CollectiveOp::Barrier: return "ncclAllReduce (barrier)";
    case CollectiveOp::GraphReplay: return "a CUDA graph replay";
  }
  return "an NCCL call";
}

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  auto* a0 = static_cast<const char*>(a.raw_data());
  auto* b0 = static_cast<const char*>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

std::string seconds_text(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::chrono::duration<double>(d).count());
  return buf;
}

// How a host thread waits for the GPU or for NCCL: a few yields (a short collective is done in
// microseconds), then sleeps growing to 1 ms (a long one should not cost a core).
class Backoff {
 public:
  void pause() {
    if (++rounds_ <= 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min(std::chrono::microseconds(20 * (rounds_ - 64)),
                                           std::chrono::microseconds(1000)));
    }
  }

 private:
  int rounds_ = 0;
};

// A CUDA event has passed (never recorded counts as passed, as cudaEventQuery has it); a CUDA
// error also counts, so that waiters stop waiting and report it.
bool event_passed(CUevent_st* event) {
  return event == nullptr || cudaEventQuery(event) != cudaErrorNotReady;
}

}  // namespace

// ---- State shared by the group, its Works and its watchdog --------------------------------------

struct NcclGroupState {
  struct Pending {
    std::shared_ptr<NcclWork> work;
    Tensor input, output;  // held until the collective has run, so their memory stays NCCL's
    std::optional<Clock::time_point> started;  // when the watchdog saw the oldest one start
  };

  NcclGroupState(int rank_, int size_, int device_, std::chrono::milliseconds timeout_, CollectiveLog& log_)
      : rank(rank_), size(size_), device(device_), timeout(timeout_), log(&log_) {}

  const int rank, size, device;
  const std::chrono::milliseconds timeout;

  // Guards everything below and the Works' error_. Every NCCL call on `comm` is made under it:
  // they never block for long, since the communicator is non-blocking. No CUDA launch is made
  // under it (NOTE [ The watchdog never waits for a launch ]).
  std::mutex mutex;
  std::condition_variable wake;  // the watchdog's sleep; notified to stop it or to abort
  bool stopping = false;
  ncclComm_t comm = nullptr;    // null before creation and after destruction or abort
  // Set with `failure`: the watchdog aborts `comm`, outside the lock (NOTE [ Aborted by the
  // watchdog alone ]).
  bool abort_requested = false;
  std::string failure;          // the first failure: non-empty once the group is broken
  CollectiveLog* log;           // the group's; null once the group has gone
  std::deque<Pending> pending;  // submitted and not yet seen to complete, in submission order
  // The tensors of collectives retired since the submitting thread last came by: dropped there,
  // never on the watchdog's thread (NOTE [ Freed on the submitting thread ]).
  std::vector<Tensor> released;

  std::string group_context() const {
    return detail::concat("NCCL process group, rank ", rank, " of ", size);
  }
  std::string context(const Work& work) const {
    return detail::concat(group_context(), ", collective #", work.sequence(), " ", work.fingerprint().str());
  }

  void set_state(const Work& work, CollectiveState state) {
    if (log != nullptr) log->set_state(work.sequence(), state);
  }

  // Polls while the communicator reports ncclInProgress (creation, a launch or finalisation of a
  // non-blocking communicator); the final state, or ncclInProgress when the timeout passed first.
  ncclResult_t settle_locked() {
    const Clock::time_point start = Clock::now();
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (ncclResult_t rc = ncclCommGetAsyncError(comm, &state); rc != ncclSuccess) return rc;
      if (state != ncclInProgress) return state;
      if (timeout.count() > 0 && Clock::now() - start > timeout) return ncclInProgress;
      backoff.pause();
    }
  }

  // Aborts `to_abort` (a communicator already detached from the state, or the state's own where
  // no thread can hold CUDA graphs of it: creation, destruction).
  void abort(ncclComm_t to_abort) const {
    if (to_abort == nullptr) return;
    const ncclResult_t rc = ncclCommAbort(to_abort);
    if (rc != ncclSuccess) {
      std::fprintf(stderr, "dptrain: %s: ncclCommAbort failed: %s\n", group_context().c_str(),
                   nccl_error_text(rc, nullptr).c_str());
    }
  }
  void abort_locked() {
    abort(comm);
    comm = nullptr;
    abort_requested = false;
  }
  // The communicator an abort was asked for, detached (null: none): the watchdog aborts it after
  // letting the lock go.
  ncclComm_t take_comm_to_abort_locked() {
    if (!abort_requested) return nullptr;
    abort_requested = false;
    return std::exchange(comm, nullptr);
  }

  // Retires the collectives at the front that have run (the communication stream runs them in
  // order, so the first incomplete one ends the scan); their tensors move to `released`.
  void retire_locked() {
    while (!pending.empty() && event_passed(pending.front().work->done_)) {
      Pending& done = pending.front();
      set_state(*done.work, done.work->error_.empty() ? CollectiveState::Completed : CollectiveState::Failed);
      for (Tensor* t : {&done.input, &done.output})
        if (t->defined()) released.push_back(std::move(*t));
      pending.pop_front();
    }
  }
  // On the submitting thread only: lets the retired collectives' tensors go.
  void drop_released_locked() { std::vector<Tensor>().swap(released); }

  // Breaks the group: `text` (with its context) becomes the failure, every incomplete collective
  // fails (`culprit`, if any, with `text` itself) and the watchdog is woken to abort the
  // communicator (NOTE [ Aborted by the watchdog alone ]). Their tensors stay pending until the
  // aborted kernels have returned.
  void fail_locked(const NcclWork* culprit, const std::string& text, bool print) {
    if (!failure.empty()) return;
    retire_locked();  // what has run before the failure succeeded
    failure = text;
    if (print) std::fprintf(stderr, "dptrain NCCL watchdog: %s\n", text.c_str());
    abort_requested = comm != nullptr;
    wake.notify_all();
    for (Pending& p : pending) {
      NcclWork& work = *p.work;
      work.error_ = &work == culprit ? text : broken_while_waiting(work);
      set_state(work, CollectiveState::Failed);
    }
  }
  std::string broken_while_waiting(const NcclWork& work) const {
    return detail::concat(context(work), ": not completed, the group was broken while it waited: ", failure);
  }

  // Asks NCCL for an asynchronous error (a peer or the network failed) and breaks the group on one.
  void check_health_locked(bool print) {
    if (comm == nullptr || !failure.empty()) return;
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t rc = ncclCommGetAsyncError(comm, &state); rc != ncclSuccess) state = rc;
    if (state == ncclSuccess || state == ncclInProgress) return;
    const std::string why = detail::concat("NCCL reported an asynchronous error: ", nccl_error_text(state, comm),
                                           "; the NCCL communicator was aborted");
    retire_locked();
    const NcclWork* culprit = pending.empty() ? nullptr : pending.front().work.get();
    fail_locked(culprit, detail::concat(culprit ? context(*culprit) : group_context(), ": ", why), print);
  }

  // One watchdog round (NOTE [ NCCL errors and abort ]).
  void watch_locked(Clock::time_point now) {
    retire_locked();
    check_health_locked(/*print=*/true);
    if (!failure.empty() || pending.empty()) return;
    Pending& oldest = pending.front();
    if (!oldest.started) {
      if (event_passed(oldest.work->ready_)) {
        oldest.started = now;
        set_state(*oldest.work, CollectiveState::Running);
      }
      return;
    }
    if (timeout.count() > 0 && now - *oldest.started > timeout) {
      fail_locked(oldest.work.get(),
                  detail::concat(context(*oldest.work), ": has not completed after ",
                                 seconds_text(now - *oldest.started), " s (timeout ", seconds_text(timeout),
                                 " s); the NCCL communicator was aborted. Another rank has probably stopped issuing "
                                 "collectives, died, or issued a different one (NCCL does not check that ranks agree; "
                                 "the MPI backend names each rank's collective)"),
                  /*print=*/true);
    }
  }
};

// ---- NcclWork --------------------------------------------------------------------------------

NcclWork::NcclWork(uint64_t sequence, const CollectiveFingerprint& fingerprint,
                   std::shared_ptr<NcclGroupState> state, CUstream_st* compute_stream, bool host_wait)
    : Work(sequence, fingerprint), state_(std::move(state)), compute_stream_(compute_stream), host_wait_(host_wait) {}

NcclWork::~NcclWork() {
  // Destroying an event the GPU has not reached yet is fine: CUDA releases it once reached.
  for (CUevent_st* event : {ready_, done_}) {
    if (event != nullptr) DP_CUDA_REPORT(state_->device, cudaEventDestroy(event));
  }
}

bool NcclWork::done_passed() const { return event_passed(done_); }

bool NcclWork::is_completed() const {
  {
    std::lock_guard lock(state_->mutex);
    if (!error_.empty()) return true;
  }
  if (captured_) return false;  // runs only inside replays (NOTE [ Collectives in CUDA graphs ])
  return done_passed();
}

std::optional<double> NcclWork::device_ms_since_ready_of(const Work& first) const {
  const auto* from = dynamic_cast<const NcclWork*>(&first);
  if (from == nullptr || from->state_ != state_ || !timed_ || !from->timed_) return std::nullopt;
  {
    std::lock_guard lock(state_->mutex);
    if (!error_.empty() || !from->error_.empty()) return std::nullopt;
  }
  if (cudaEventQuery(done_) != cudaSuccess || cudaEventQuery(from->ready_) != cudaSuccess) return std::nullopt;
  float ms = 0;
  DP_CUDA_CHECK(state_->device, cudaEventElapsedTime(&ms, from->ready_, done_), "timing ", state_->context(*this),
                " from the start of ", state_->context(*from));
  return static_cast<double>(ms);
}

void NcclWork::wait() {
  if (host_wait_) return synchronize();
  {
    std::lock_guard lock(state_->mutex);
    state_->check_health_locked(/*print=*/false);
    if (!error_.empty()) throw Error(error_);
  }
  if (done_ == nullptr) return;
  if (captured_) {
    // NOTE [ Collectives in CUDA graphs ]: the join goes into the capture; once it has ended, the
    // collective runs only inside replays, which the compute stream orders already.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DP_CUDA_CHECK(state_->device, cudaStreamIsCapturing(compute_stream_, &capture));
    if (capture == cudaStreamCaptureStatusActive) {
      DP_CUDA_CHECK(state_->device, cudaStreamWaitEvent(compute_stream_, done_, 0), "joining ",
                    state_->context(*this), " into the CUDA graph capture");
    }
    return;
  }
  const cudaError_t status = cudaEventQuery(done_);
  if (status == cudaSuccess) return;  // already run: nothing to order
  if (status != cudaErrorNotReady) {
    cuda::throw_cuda_error("cudaEventQuery(done)", status, state_->device, state_->context(*this));
  }
  DP_CUDA_CHECK(state_->device, cudaStreamWaitEvent(compute_stream_, done_, 0),
                "making the compute stream wait for ", state_->context(*this));
}

void NcclWork::synchronize() {
  DP_CHECK(!captured_, state_->context(*this), ": a host wait for a collective recorded into a CUDA graph; it runs "
           "only inside the graph's replays (NOTE [ Collectives in CUDA graphs ])");
  Backoff backoff;
  for (;;) {
    {
      std::lock_guard lock(state_->mutex);
      if (!error_.empty()) throw Error(error_);
      if (done_passed()) break;
      state_->check_health_locked(/*print=*/false);
      if (!error_.empty()) throw Error(error_);
    }
    backoff.pause();
  }
  if (done_ != nullptr) {
    const cudaError_t status = cudaEventQuery(done_);
    if (status != cudaSuccess) {
      cuda::throw_cuda_error("cudaEventQuery(done)", status, state_->device, state_->context(*this));
    }
  }
}

// ---- Construction and destruction ---------------------------------------------------------------

namespace {

Device checked_gpu(Device gpu) {
  DP_CHECK(gpu.valid() && gpu.is_cuda(), "NcclProcessGroup: NCCL communicates between GPUs, got device ", gpu.str(),
           " (use the MPI backend for CPU tensors)");
  return gpu;
}

std::chrono::milliseconds poll_interval(std::chrono::milliseconds timeout) {
  using std::chrono::milliseconds;
  if (timeout.count() == 0) return milliseconds(100);
  return std::clamp(timeout / 10, milliseconds(1), milliseconds(100));
}

constexpr const char* kLaunchOrderVariable = "NCCL_LAUNCH_ORDER_IMPLICIT";

// ncclGetVersion's code as text: 22809 → "2.28.9" (since 2.9: major·10000 + minor·100 + patch;
// before: major·1000 + minor·100 + patch, 2804 → "2.8.4").
std::string nccl_version_text(int code) {
  if (code < 10000) return detail::concat(code / 1000, ".", code / 100 % 10, ".", code % 100);
  return detail::concat(code / 10000, ".", code / 100 % 100, ".", code % 100);
}

// NOTE [ Several communicators on one GPU ]; `context` names the group in errors.
void order_launches_across_communicators(const std::string& context) {
  int version = 0;
  check_nccl(ncclGetVersion(&version), nullptr, "ncclGetVersion", context);
  bool must_set = false;
  try {
    must_set = must_set_implicit_launch_order(std::getenv(kLaunchOrderVariable), version);
  } catch (const Error& e) {
    throw Error(detail::concat(context, ": ", e.what()));
  }
  // Overwrites only an empty value (NCCL reads it as unset). setenv could race a getenv on another
  // thread; the run's own threads (signals, the CPU pool) are idle while its groups are made, and
  // the CUDA and MPI libraries read their environment when they start, before this.
  if (must_set && setenv(kLaunchOrderVariable, "1", /*overwrite=*/1) != 0)
    throw Error(detail::concat(context, ": setting ", kLaunchOrderVariable, "=1 failed: ", std::strerror(errno)));
}

}  // namespace

bool must_set_implicit_launch_order(const char* value, int nccl_version) {
  const char* why = "a run that keeps several NCCL communicators busy on one GPU (synchronised BatchNorm beside "
                    "the gradients) needs NCCL to order their launches, or the ranks can deadlock";
  if (nccl_version < 22600)
    throw Error(detail::concat(why, "; NCCL_LAUNCH_ORDER_IMPLICIT, which does, came with NCCL 2.26 and this process "
                               "loaded NCCL ", nccl_version_text(nccl_version),
                               ": put a newer libnccl.so.2 first on the library path, or turn "
                               "distributed.sync_batchnorm off"));
  if (value == nullptr || *value == '\0') return true;
  // As NCCL reads it (ncclLoadParam): strtoll with base 0, on if not zero.
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(value, &end, 0);
  if (errno == 0 && end != value && parsed != 0) return false;
  throw Error(detail::concat(why, "; the environment sets ", kLaunchOrderVariable, "=", value,
                             ", which NCCL reads as off: unset it (dptrain then sets it to 1) or set it to 1, or "
                             "turn distributed.sync_batchnorm off"));
}

NcclProcessGroup::NcclProcessGroup(MpiEnvironment& mpi, Device gpu, NcclProcessGroupOptions options)
    : gpu_(checked_gpu(gpu)), backend_(static_cast<cuda::CudaBackend&>(gpu_.backend())), options_(options) {
  DP_CHECK(options_.timeout.count() >= 0, "NcclProcessGroup: timeout must be positive, or zero for none (got ",
           options_.timeout.count(), " ms)");
  check_mpi(MPI_Comm_rank(mpi.world_comm(), &rank_), "MPI_Comm_rank", "NcclProcessGroup");
  check_mpi(MPI_Comm_size(mpi.world_comm(), &size_), "MPI_Comm_size", "NcclProcessGroup");
  state_ = std::make_shared<NcclGroupState>(rank_, size_, gpu_.index(), options_.timeout, log_);
  if (options_.shares_gpu_with_other_groups) order_launches_across_communicators(state_->group_context());

  // Rank 0's id goes to every rank together with rank 0's status, so that a failure there stops
  // every rank at once instead of leaving the others in ncclCommInitRankConfig.
  struct Bootstrap {
    ncclUniqueId id;
    int32_t status;
  } boot{};
  if (rank_ == 0) boot.status = ncclGetUniqueId(&boot.id);
  check_mpi(MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, mpi.world_comm()), "MPI_Bcast",
            state_->group_context(), ": broadcasting the NCCL unique id");
  if (boot.status != ncclSuccess) {
    const auto status = static_cast<ncclResult_t>(boot.status);
    throw Error(detail::concat(state_->group_context(), ": ncclGetUniqueId failed on rank 0: ",
                               rank_ == 0 ? nccl_error_text(status, nullptr)
                                          : detail::concat(ncclGetErrorString(status), " (", nccl_result_name(status),
                                                           "; rank 0 has the details)")));
  }

  activate();  // after the broadcast, which every rank must reach; NCCL takes the current GPU
  {
    std::lock_guard lock(state_->mutex);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // NOTE [ NCCL errors and abort ]
    ncclResult_t rc = ncclCommInitRankConfig(&state_->comm, size_, boot.id, rank_, &config);
    if (state_->comm != nullptr && (rc == ncclSuccess || rc == ncclInProgress)) rc = state_->settle_locked();
    if (rc != ncclSuccess) {
      const std::string why =
          rc == ncclInProgress
              ? detail::concat("not done after the timeout of ", seconds_text(options_.timeout),
                               " s (are all ", size_, " ranks creating it, each on a GPU of its own?)")
              : nccl_error_text(rc, state_->comm);
      state_->abort_locked();
      throw Error(detail::concat(state_->group_context(), ": creating the NCCL communicator on ", gpu_.str(),
                                 " failed: ", why));
    }
  }
  try {
    // The device's highest priority (issue 9; PyTorch offers it as ProcessGroupNCCL's
    // is_high_priority_stream option): a bucket's all-reduce, ready in the middle of backward,
    // gets the SMs it needs ahead of the backward kernels queued behind it, so that it runs hidden
    // instead of waiting for a gap; its kernels are few and small, so backward loses little.
    int least_priority = 0, greatest_priority = 0;
    DP_CUDA_CHECK(gpu_.index(), cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority),
                  "NcclProcessGroup: the stream priorities of ", gpu_.str());
    DP_CUDA_CHECK(gpu_.index(),
                  cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest_priority),
                  "NcclProcessGroup: the communication stream");
    barrier_buffer_ = zeros({1}, kFloat32, gpu_);
    watchdog_ = std::thread([this] { run_watchdog(); });
  } catch (...) {
    shut_down();
    throw;
  }
}

NcclProcessGroup::~NcclProcessGroup() { shut_down(); }

void NcclProcessGroup::shut_down() noexcept {
  try {
    // What was submitted runs to the end: the other ranks expect it. A hang ends at the
    // watchdog's timeout, which breaks the group.
    Backoff backoff;
    for (;;) {
      {
        std::lock_guard lock(state_->mutex);
        state_->retire_locked();
        state_->check_health_locked(/*print=*/true);
        if (state_->pending.empty() || !state_->failure.empty()) break;
      }
      backoff.pause();
    }
    if (watchdog_.joinable()) {
      {
        std::lock_guard lock(state_->mutex);
        state_->stopping = true;
      }
      state_->wake.notify_all();
      watchdog_.join();
    }
    {
      std::lock_guard lock(state_->mutex);
      if (state_->abort_requested) {
        state_->abort_locked();  // a failure the watchdog (never started) did not get to abort
      } else if (state_->comm != nullptr) {
        ncclResult_t rc = ncclCommFinalize(state_->comm);
        if (rc == ncclSuccess || rc == ncclInProgress) rc = state_->settle_locked();
        if (rc == ncclSuccess) {
          rc = ncclCommDestroy(state_->comm);
          state_->comm = nullptr;
          if (rc != ncclSuccess) {
            std::fprintf(stderr, "dptrain: %s: ncclCommDestroy failed: %s\n", state_->group_context().c_str(),
                         nccl_error_text(rc, nullptr).c_str());
          }
        } else {
          std::fprintf(stderr, "dptrain: %s: finalising the NCCL communicator failed (%s); aborting it\n",
                       state_->group_context().c_str(),
                       rc == ncclInProgress ? "timed out" : nccl_error_text(rc, state_->comm).c_str());
          state_->abort_locked();
        }
      }
    }
    // After an abort NCCL's kernels return; once the stream is idle the tensors can go.
    if (comm_stream_ != nullptr) DP_CUDA_REPORT(gpu_.index(), cudaStreamSynchronize(comm_stream_));
    {
      std::lock_guard lock(state_->mutex);
      state_->retire_locked();
      state_->pending.clear();  // only after a CUDA error could any be left
      state_->drop_released_locked();
      state_->log = nullptr;
    }
    if (comm_stream_ != nullptr) DP_CUDA_REPORT(gpu_.index(), cudaStreamDestroy(comm_stream_));
    comm_stream_ = nullptr;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dptrain: %s: destroying the NCCL process group: %s\n", state_->group_context().c_str(),
                 e.what());
  }
}

void NcclProcessGroup::activate() const {
  int current = -1;
  DP_CUDA_CHECK(gpu_.index(), cudaGetDevice(&current));
  if (current != gpu_.index()) DP_CUDA_CHECK(gpu_.index(), cudaSetDevice(gpu_.index()));
}

void NcclProcessGroup::run_watchdog() {
  pthread_setname_np(pthread_self(), "dp-nccl-watch");  // visible in top/gdb; failure is harmless
  try {
    activate();  // ncclCommAbort may run here
  } catch (const Error& e) {
    std::fprintf(stderr, "dptrain NCCL watchdog: %s\n", e.what());
  }
  const std::chrono::milliseconds poll = poll_interval(options_.timeout);
  std::unique_lock lock(state_->mutex);
  for (;;) {
    if (!state_->stopping && !state_->abort_requested) state_->wake.wait_for(lock, poll);
    if (!state_->stopping) {
      try {
        state_->watch_locked(Clock::now());
      } catch (const std::exception& e) {  // formatting only; never expected
        std::fprintf(stderr, "dptrain NCCL watchdog: %s\n", e.what());
      }
    }
    // NOTE [ Aborted by the watchdog alone ]: without the lock, which the training thread needs
    // to learn of the failure and let its graphs go, which this abort may wait for.
    if (ncclComm_t to_abort = state_->take_comm_to_abort_locked()) {
      lock.unlock();
      state_->abort(to_abort);
      lock.lock();
    }
    if (state_->stopping) break;
  }
}

// ---- Submission ------------------------------------------------------------------------------

std::string NcclProcessGroup::where(const char* op) const {
  return detail::concat("NcclProcessGroup::", op, " on rank ", rank_, " of ", size_);
}

void NcclProcessGroup::check_tensor(const char* op, const char* role, const Tensor& tensor) const {
  DP_CHECK(tensor.defined(), where(op), ": the ", role, " is undefined");
  DP_CHECK(tensor.device().is_cuda(), where(op), ": the ", role, " ", tensor.str(),
           " is not on a GPU; the NCCL backend communicates CUDA tensors (use the MPI backend for CPU tensors)");
  DP_CHECK(tensor.device() == gpu_, where(op), ": the ", role, " ", tensor.str(), " is not on this group's GPU (",
           gpu_.str(), ")");
  DP_CHECK(tensor.is_contiguous(), where(op), ": the ", role, " ", tensor.str(),
           " is not contiguous; pass a contiguous tensor (such as a flat bucket)");
}

// The same rules as the MPI backend (mpi_reduction_supported), so that code runs on either.
void NcclProcessGroup::check_reduction(const char* op, DType dtype, CollectiveReduce reduce) const {
  DP_CHECK(reduce != CollectiveReduce::None, where(op), ": choose CollectiveReduce::Sum or CollectiveReduce::Average");
  DP_CHECK(dtype != kUInt8 && dtype != kBool, where(op), ": ", collective_reduce_name(reduce), " of ",
           dtype_name(dtype), ": uint8 and bool tensors cannot be reduced (sums would overflow or lose meaning); "
           "convert to int32 first");
  DP_CHECK(is_floating(dtype) || reduce != CollectiveReduce::Average, where(op), ": ", collective_reduce_name(reduce),
           " of ", dtype_name(dtype),
           ": the average of an integer tensor is not an integer; sum, then divide as floats");
}

std::shared_ptr<NcclWork> NcclProcessGroup::open_work_locked(const CollectiveFingerprint& fingerprint,
                                                              bool host_wait, bool capturing) {
  // Retiring queries events, which the capturing thread must not do: it would invalidate the
  // capture (the watchdog, on its own thread, goes on retiring meanwhile). Memory freed during a
  // capture would stay the graph's until it is destroyed, so the tensors wait for the next step.
  if (!capturing) {
    state_->retire_locked();
    state_->drop_released_locked();
  }
  const uint64_t sequence = log_.append(fingerprint);
  std::shared_ptr<NcclWork> work(new NcclWork(sequence, fingerprint, state_, backend_.stream(), host_wait));
  if (!state_->failure.empty()) mark_not_run_locked(*work, "the group is broken by an earlier failure");
  return work;
}

void NcclProcessGroup::mark_not_run_locked(NcclWork& work, const char* why) {
  work.error_ = detail::concat(state_->context(work), ": not run, ", why, ": ", state_->failure);
  log_.set_state(work.sequence(), CollectiveState::Failed);
}

void NcclProcessGroup::fail_launch_locked(NcclWork& work, const std::exception& e) {
  // A launch failure breaks the group like any other (NOTE [ Process group contract ]); the error
  // comes from wait(), as run-time errors do.
  const std::string text = detail::concat(state_->context(work), ": ", e.what());
  work.error_ = text;
  log_.set_state(work.sequence(), CollectiveState::Failed);
  state_->fail_locked(&work, text, /*print=*/false);
}

WorkPtr NcclProcessGroup::submit(const CollectiveFingerprint& fingerprint, const Tensor& input, const Tensor& output,
                                 bool host_wait) {
  activate();
  const int device = gpu_.index();
  // NOTE [ Collectives in CUDA graphs ]: recorded into the capture, not run.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DP_CUDA_CHECK(device, cudaStreamIsCapturing(backend_.stream(), &capture),
                "NcclProcessGroup: asking whether the compute stream is being captured");
  // An earlier operation broke the capture: say so, and leave the group whole (a launch into the
  // invalidated capture would fail and abort the communicator, hiding the cause behind "broken").
  DP_CHECK(capture != cudaStreamCaptureStatusInvalidated, where(collective_op_name(fingerprint.op)),
           ": the compute stream's CUDA graph capture was invalidated by an earlier operation, before this ",
           "collective (NOTE [ Collectives in CUDA graphs ]); the group is left as it was");
  const bool captured = capture == cudaStreamCaptureStatusActive;
  DP_CHECK(!(captured && host_wait), where(collective_op_name(fingerprint.op)), ": it blocks the host until every ",
           "rank has reached it, which a CUDA graph capture cannot hold (NOTE [ Collectives in CUDA graphs ])");
  if (output.defined()) output.bump_version();  // written in place, asynchronously
  // NOTE [ The watchdog never waits for a launch ]: the state's mutex is held only around the
  // bookkeeping and the NCCL call, never around a CUDA launch on a stream.
  std::lock_guard launching(launch_mutex_);  // one submission at a time: sequence numbers in launch order
  std::shared_ptr<NcclWork> work;
  {
    std::lock_guard lock(state_->mutex);
    work = open_work_locked(fingerprint, host_wait, captured);
    work->captured_ = captured;
    if (!work->error_.empty()) return work;
  }
  try {
    // NOTE [ NCCL streams and waits ]; under capture the same calls become the graph's edges.
    // Outside one the events also time the collective (NOTE [ Communication timed on the device ]
    // in comm/ddp/reducer.h); an event recorded in a capture has no time of its own.
    const unsigned event_flags = captured ? cudaEventDisableTiming : cudaEventDefault;
    DP_CUDA_CHECK(device, cudaEventCreateWithFlags(&work->ready_, event_flags));
    DP_CUDA_CHECK(device, cudaEventCreateWithFlags(&work->done_, event_flags));
    work->timed_ = !captured;
    DP_CUDA_CHECK(device, cudaEventRecord(work->ready_, backend_.stream()));
    DP_CUDA_CHECK(device, cudaStreamWaitEvent(comm_stream_, work->ready_, 0));
  } catch (const std::exception& e) {
    std::lock_guard lock(state_->mutex);
    fail_launch_locked(*work, e);
    return work;
  }
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->failure.empty()) {  // broken while the events were queued: NCCL is not called
      mark_not_run_locked(*work, "the group was broken while it was being submitted");
      if (captured) {
        // The communication stream has joined the capture (it waits for `ready`): join it back, or
        // ending the capture would fail over an unjoined stream and hide this error.
        try {
          DP_CUDA_CHECK(device, cudaEventRecord(work->done_, comm_stream_));
          DP_CUDA_CHECK(device, cudaStreamWaitEvent(backend_.stream(), work->done_, 0));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "dptrain: %s: %s\n", state_->context(*work).c_str(), e.what());
        }
      }
      return work;
    }
    try {
      launch_collective_locked(fingerprint, input, output);
    } catch (const std::exception& e) {
      fail_launch_locked(*work, e);
      return work;
    }
  }
  try {
    DP_CUDA_CHECK(device, cudaEventRecord(work->done_, comm_stream_));
  } catch (const std::exception& e) {
    std::lock_guard lock(state_->mutex);
    fail_launch_locked(*work, e);
    return work;
  }
  std::lock_guard lock(state_->mutex);
  watch_launched_locked(work, input, output);
  return work;
}

void NcclProcessGroup::launch_collective_locked(const CollectiveFingerprint& fingerprint, const Tensor& input,
                                                const Tensor& output) {
  ncclComm_t comm = state_->comm;
  const ncclDataType_t type = nccl_datatype(fingerprint.dtype);
  const auto count = static_cast<size_t>(fingerprint.count);
  ncclResult_t rc = ncclSuccess;
  switch (fingerprint.op) {
    case CollectiveOp::AllReduce:
      if (count > 0) {
        rc = ncclAllReduce(output.raw_data(), output.raw_data(), count, type, nccl_reduce_op(fingerprint.reduce), comm,
                           comm_stream_);
      }
      break;
    case CollectiveOp::Broadcast:
      if (count > 0) {
        rc = ncclBroadcast(output.raw_data(), output.raw_data(), count, type, fingerprint.root, comm, comm_stream_);
      }
      break;
    case CollectiveOp::AllGather:  // in place when the input is this rank's slot of the output
      if (count > 0) rc = ncclAllGather(input.raw_data(), output.raw_data(), count, type, comm, comm_stream_);
      break;
    case CollectiveOp::ReduceScatter:
      if (count > 0) {
        rc = ncclReduceScatter(input.raw_data(), output.raw_data(), count / static_cast<size_t>(size_), type,
                               nccl_reduce_op(fingerprint.reduce), comm, comm_stream_);
      }
      break;
    case CollectiveOp::Barrier:
      rc = ncclAllReduce(barrier_buffer_.raw_data(), barrier_buffer_.raw_data(), 1, ncclFloat32, ncclSum, comm,
                         comm_stream_);
      break;
    case CollectiveOp::GraphReplay:  // queued by replay_graph(), never submitted
      throw Error("a graph replay is not a collective to submit");
  }
  // NCCL launches a non-blocking communicator's kernels on a thread of its own: wait until it has
  // (NOTE [ Several communicators on one GPU ]), at most for the timeout.
  if (rc == ncclInProgress) rc = state_->settle_locked();
  if (rc == ncclInProgress) {
    throw Error(detail::concat(nccl_call_name(fingerprint.op), " was still being launched after the timeout of ",
                               seconds_text(options_.timeout), " s"));
  }
  check_nccl(rc, comm, nccl_call_name(fingerprint.op));
}

void NcclProcessGroup::watch_launched_locked(const std::shared_ptr<NcclWork>& work, const Tensor& input,
                                             const Tensor& output) {
  if (work->captured_) {
    log_.set_state(work->sequence(), CollectiveState::Captured);  // its replays are watched instead
    return;
  }
  // Broken while this launch was queued: it fails like every collective the failure found pending;
  // its tensors are still held until its (aborted) kernels have returned.
  if (!state_->failure.empty() && work->error_.empty()) {
    work->error_ = state_->broken_while_waiting(*work);
    log_.set_state(work->sequence(), CollectiveState::Failed);
  }
  state_->pending.push_back({work, input, output, std::nullopt});
}

WorkPtr NcclProcessGroup::replay_graph(const std::function<void()>& launch, int64_t collectives, int64_t tag) {
  DP_CHECK(collectives >= 0, where("replay_graph"), ": a graph cannot hold ", collectives, " collectives");
  activate();
  const int device = gpu_.index();
  // NOTE [ The watchdog never waits for a launch ]: cudaGraphLaunch blocks when the compute
  // stream's queue is full behind a hung collective; the watchdog must stay free to abort it.
  std::lock_guard launching(launch_mutex_);
  std::shared_ptr<NcclWork> work;
  {
    std::lock_guard lock(state_->mutex);
    work = open_work_locked({CollectiveOp::GraphReplay, CollectiveReduce::None, kUInt8, collectives, -1, tag}, false,
                            false);
    // A broken group does not replay: the graph's collectives would wait for peers that have stopped.
    if (!work->error_.empty()) return work;
  }
  try {
    // NOTE [ Collectives in CUDA graphs ]: the replay, bracketed on the compute stream, is watched
    // as one collective.
    DP_CUDA_CHECK(device, cudaEventCreateWithFlags(&work->ready_, cudaEventDisableTiming));
    DP_CUDA_CHECK(device, cudaEventCreateWithFlags(&work->done_, cudaEventDisableTiming));
    {
      std::lock_guard lock(state_->mutex);  // broken meanwhile: do not replay after all
      if (!state_->failure.empty()) {
        mark_not_run_locked(*work, "the group is broken by an earlier failure");
        return work;
      }
    }
    DP_CUDA_CHECK(device, cudaEventRecord(work->ready_, backend_.stream()));
    launch();
    DP_CUDA_CHECK(device, cudaEventRecord(work->done_, backend_.stream()));
  } catch (const std::exception& e) {
    std::lock_guard lock(state_->mutex);
    fail_launch_locked(*work, e);
    return work;
  }
  std::lock_guard lock(state_->mutex);
  watch_launched_locked(work, Tensor(), Tensor());
  return work;
}

WorkPtr NcclProcessGroup::all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag) {
  check_tensor("all_reduce", "tensor", tensor);
  check_reduction("all_reduce", tensor.dtype(), op);
  return submit({CollectiveOp::AllReduce, op, tensor.dtype(), tensor.numel(), -1, tag}, tensor, tensor, false);
}

WorkPtr NcclProcessGroup::broadcast(const Tensor& tensor, int root, int64_t tag) {
  check_tensor("broadcast", "tensor", tensor);
  DP_CHECK(root >= 0 && root < size_, where("broadcast"), ": root ", root, " is not a rank of this group of ", size_);
  return submit({CollectiveOp::Broadcast, CollectiveReduce::None, tensor.dtype(), tensor.numel(), root, tag}, tensor,
                tensor, false);
}

WorkPtr NcclProcessGroup::all_gather(const Tensor& input, const Tensor& output, int64_t tag) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  DP_CHECK(input.dtype() == output.dtype(), where("all_gather"), ": input ", input.str(), " and output ",
           output.str(), " differ in dtype");
  DP_CHECK(output.numel() == size_ * input.numel(), where("all_gather"), ": output ", output.str(), " must hold ",
           size_, " x ", input.numel(), " = ", size_ * input.numel(), " elements (one input per rank)");
  // NCCL's in-place form is the input being this rank's slot; any other overlap is an error.
  const bool in_place = input.raw_data() == static_cast<char*>(output.raw_data()) +
                                               static_cast<size_t>(rank_) * input.nbytes();
  DP_CHECK(in_place || !bytes_overlap(input, output), where("all_gather"),
           ": input and output overlap; the input may alias only this rank's slot of the output");
  return submit({CollectiveOp::AllGather, CollectiveReduce::None, input.dtype(), input.numel(), -1, tag}, input,
                output, false);
}

WorkPtr NcclProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, CollectiveReduce op,
                                         int64_t tag) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  DP_CHECK(input.dtype() == output.dtype(), where("reduce_scatter"), ": input ", input.str(), " and output ",
           output.str(), " differ in dtype");
  check_reduction("reduce_scatter", input.dtype(), op);
  DP_CHECK(input.numel() == size_ * output.numel(), where("reduce_scatter"), ": input ", input.str(), " must hold ",
           size_, " x ", output.numel(), " = ", size_ * output.numel(), " elements (one output-sized chunk per rank)");
  DP_CHECK(!bytes_overlap(input, output), where("reduce_scatter"), ": input and output overlap");
  return submit({CollectiveOp::ReduceScatter, op, input.dtype(), input.numel(), -1, tag}, input, output, false);
}

WorkPtr NcclProcessGroup::barrier(int64_t tag) {
  return submit({CollectiveOp::Barrier, CollectiveReduce::None, kUInt8, 0, -1, tag}, Tensor(), Tensor(),
                /*host_wait=*/true);
}

void NcclProcessGroup::synchronize() {
  activate();
  // A host wait, which a capture cannot hold; and retiring queries events, which would invalidate
  // the capture (NOTE [ Collectives in CUDA graphs ]).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  DP_CUDA_CHECK(gpu_.index(), cudaStreamIsCapturing(backend_.stream(), &capture),
                "NcclProcessGroup: asking whether the compute stream is being captured");
  DP_CHECK(capture == cudaStreamCaptureStatusNone, where("synchronize"),
           ": a host wait during a CUDA graph capture of the compute stream (NOTE [ Collectives in CUDA graphs ])");
  // The newest entry of each stream: collectives run in order on the communication stream, graph
  // replays in order on the compute stream, but neither stream waits for the other unless a
  // wait() said so — an eager collective submitted before a replay may still be running after it.
  std::shared_ptr<NcclWork> last_collective, last_replay;
  {
    std::lock_guard lock(state_->mutex);
    state_->retire_locked();
    if (!state_->failure.empty()) throw Error(state_->failure);
    for (auto it = state_->pending.rbegin(); it != state_->pending.rend(); ++it) {
      std::shared_ptr<NcclWork>& newest =
          it->work->fingerprint().op == CollectiveOp::GraphReplay ? last_replay : last_collective;
      if (!newest) newest = it->work;
      if (last_collective && last_replay) break;
    }
  }
  if (!last_collective && !last_replay) return;
  for (const std::shared_ptr<NcclWork>& last : {last_collective, last_replay})
    if (last) last->synchronize();  // its stream runs them in order: the newest done is all done
  std::lock_guard lock(state_->mutex);
  state_->retire_locked();  // their tensors go and the log says Completed now, not at the next poll
  state_->drop_released_locked();
}

}  // namespace dp
