// NcclProcessGroup: the ProcessGroup for CUDA tensors over NCCL, one GPU per rank.
//
// NOTE [ NCCL streams and waits ]
// The group owns one communication stream (non-blocking, of the device's highest priority, so
// that a bucket's all-reduce ready mid-backward is not queued behind backward's kernels) on its
// GPU; the compute stream is the CUDA backend's stream(). Each collective is queued, on the
// submitting thread, as
//   1. an event `ready` recorded on the compute stream, which the communication stream waits on,
//      so NCCL reads the tensors only after the kernels that wrote them (submission order on the
//      compute stream);
//   2. the NCCL call on the communication stream (collectives run in submission order);
//   3. an event `done` recorded on the communication stream after it.
// Nothing blocks the host. Work::is_completed() asks whether `done` has passed. Work::wait() is
// STREAM-ORDERED, as in PyTorch: it makes the compute stream wait for `done` and returns at once
// (having thrown first if the collective has already failed). Kernels queued on the compute stream
// afterwards, and the host copies of the CUDA backend (which wait for the compute stream), see the
// result. Host code that reads the memory some other way, or times the communication, calls
// NcclWork::synchronize(), which blocks the host until `done` (polling for NCCL errors), or
// NcclProcessGroup::synchronize() for everything submitted. barrier() is the exception: its
// wait() blocks the host, as a barrier must.
//
// The DDP reducer (comm/ddp/reducer.cpp) is correct with this: finish() waits on every bucket, so
// the optimiser's kernels, queued later on the compute stream, read the averaged gradients. Its
// timing is not: finish() returns without blocking, so ReducerStepStats' exposed communication
// reads about zero and the time the GPU spends waiting for NCCL shows up wherever the host next
// waits for the compute stream (reading the loss, the end of the step).
//
// Lifetime: the group keeps each collective's tensors until `done` has passed, whether or not the
// Work is kept, so freeing a tensor right after submitting never lets the memory pool hand its
// memory to other work while NCCL still uses it (NOTE [ CUDA memory pool ]).
//
// NOTE [ Freed on the submitting thread ]
// The watchdog finds most collectives done, but it never drops their tensors: a tensor whose last
// handle the group holds (SyncBatchNorm's temporaries) would be freed on the watchdog's thread,
// and the CUDA backend's frees are not made for that — during a CUDA graph capture on the
// training thread a free must go to the graph's memory (NOTE [ Graph memory ] in
// runtime/backend/cuda/cuda_backend.h), and a cudaFreeAsync on the capturing stream from another
// thread would be recorded into the graph and run at every replay. Retired tensors wait in the
// group's state until the submitting thread's next submission (outside a capture) or
// synchronize(), or the group's destruction, and are dropped there.
//
// NOTE [ NCCL errors and abort ]
// The communicator is non-blocking (ncclConfig_t::blocking = 0): no NCCL call blocks the host, so
// a collective that never completes can always be aborted. Each group runs a watchdog thread that,
// every poll interval (100 ms at most),
//   - releases the tensors of collectives that have completed and marks them Completed in the log;
//   - asks ncclCommGetAsyncError for an asynchronous error (a peer died, a network failure);
//   - times the oldest incomplete collective from when it started (the compute stream reached its
//     `ready` event; earlier collectives are done, so it is on the wire): past
//     NcclProcessGroupOptions::timeout it has hung.
// On an error or a timeout the group is broken and the communicator aborted (ncclCommAbort, which
// makes NCCL's kernels return; by the watchdog: NOTE [ Aborted by the watchdog alone ]): the
// failing collective's Work throws from wait() a dp::Error naming the rank, the collective's
// sequence number and fingerprint, and NCCL's own text (ncclGetErrorString and
// ncclGetLastError); the other incomplete collectives, and every later submission, throw "... the group is broken ...: <that error>". What the watchdog finds it also
// prints to stderr, once: the training thread may be blocked in some other CUDA call. Work::wait()
// and NcclWork::synchronize() poll for asynchronous errors themselves, so they throw as soon as
// NCCL reports one; a failure may still come after a stream-ordered wait() has returned, and then
// shows at the next submission or wait. A launch that NCCL rejects breaks the group the same way
// (its Work fails; the error is thrown from wait(), as run-time errors are).
//
// NOTE [ The watchdog never waits for a launch ]
// When a peer dies, the collective it left hangs and so does every stream that waits for it: the
// training thread keeps queueing kernels until CUDA's launch queue is full, and then its next
// launch blocks until the queue drains — which only the watchdog's abort makes happen. So the
// watchdog's mutex (the group state's) is never held across a CUDA launch: submit() takes it to
// open the Work, again for the NCCL call itself (non-blocking: bounded by the timeout, see
// settle_locked), and again to hand the launched collective to the watchdog; the `ready` and
// `done` records, and replay_graph()'s whole launch (cudaGraphLaunch is the launch that blocks in
// a graphed run, where nearly every launch is one), run without it. A second mutex, held by the
// submitting thread from start to end, keeps sequence numbers in launch order. A group broken
// while a launch was under way fails that collective too ("not completed, the group was broken
// while it waited"), or, before its NCCL call, does not make the call ("not run, the group was
// broken while it was being submitted").
//
// NOTE [ Aborted by the watchdog alone ]
// ncclCommAbort makes the communicator's kernels return at once, but then waits until every CUDA
// graph holding the communicator's captured collectives has been destroyed (NCCL's
// commDestroySync: "keep polling until all graphs referencing us die"; a one-rank communicator
// captures plain copies, no such plan). In a graphed run those graphs belong to the training
// thread, which lets them go only as it unwinds from the failure. So whoever finds a failure — the
// watchdog (a timeout, an asynchronous error), the training thread (a launch NCCL rejects, an
// error seen by wait()) — only records it under the state's mutex (the group is broken, every
// incomplete Work fails) and wakes the watchdog, which detaches the communicator and aborts it
// after letting the mutex go. The training thread never aborts (it would wait for its own graphs)
// and never waits for the abort; the watchdog's abort ends once the graphs are destroyed. The
// group's destructor lets the watchdog finish a requested abort before joining it: destroy the
// graphs that hold a group's collectives (launch/graphed_step.h's GraphedSteps) before the group.
//
// NOTE [ Collectives in CUDA graphs ]
// A collective submitted while the compute stream is being captured (run.cuda_graphs, NOTE [ CUDA
// graphs ] in launch/graphed_step.h) is recorded into the graph, not run (NCCL supports stream
// capture): the fork and join above (`ready` on the compute stream, the NCCL call on the
// communication stream, `done`) become the graph's edges, NCCL's kernels its nodes. Such a Work
// is captured: logged once with the state "captured", never queried (an event recorded in a
// capture has no time of its own), its wait() adds the join to the capture and nothing else, and
// a host wait — barrier(), synchronize() — is refused. The capturing thread queries no event at
// all (a query there would invalidate the capture): retiring finished collectives is left to the
// watchdog's thread meanwhile. Its tensors are not held: a graph's
// tensors outlive the graph anyway (the reducer's buckets are persistent; tensors made during the
// capture belong to the graph's memory pool).
// Each replay runs the captured collectives again without a submission, so the graph's owner
// queues every replay through replay_graph(): it brackets the launch with `ready` and `done` on
// the compute stream and queues the pair as one entry, graph_replay(N collectives), in the log and
// in the watchdog's queue. A replay that hangs (a peer stopped replaying) therefore ends at the
// timeout, and asynchronous errors break the group as they do for a collective; every rank logs
// the same replays in the same order. Every rank must capture the same collectives at the same
// step (GraphedSteps captures at the same step of a shape on every rank).
//
// NOTE [ Several communicators on one GPU ]
// NCCL's kernels spin until their peers' arrive, so two communicators with collectives in flight on
// one GPU can deadlock when the ranks start them in different orders: rank 0's SyncBatchNorm
// all-reduce waiting for rank 1's, whose GPU runs its gradient bucket's first, waiting for rank 0's
// (NCCL's guide, "Using multiple NCCL communicators concurrently"). Submitting in the same host
// order on every rank is not enough: each group has its own communication stream, and the GPU
// starts ready work of two streams in either order; in a CUDA graph two collectives on independent
// branches have no order at all. NCCL 2.26 added the remedy, NCCL_LAUNCH_ORDER_IMPLICIT=1: every
// communicator's launches on a device follow the host's submission order (inside a capture, as
// edges of the graph). With CUDA runtime and driver ≥ 12.3 the order is kept through
// launch-completion events and the kernels still overlap; otherwise — and inside a capture unless
// the driver is ≥ 12.9 (NCCL 2.27 on) — each launch waits for the previous kernel to finish, which
// is deadlock-free but serialises the statistics' all-reduce behind the gradient bucket before it.
// NCCL reads the variable once per process, at the first kernel launch of a communicator of ≥ 2
// ranks. The order it keeps is the host's, so launches must come from one thread in the same order
// on every rank: dptrain's training thread submits every collective and queues every graph replay,
// the watchdogs only poll and abort. The communicators are non-blocking, and NCCL launches such a
// communicator's kernels on a thread of its own: submit() waits (settle_locked) until the launch is
// done before returning, which is what keeps one group's launch ahead of the next group's — do not
// drop that wait. One run departs from the common order: with distributed.find_unused_parameters, a
// bucket holding a parameter one rank left unused is launched from the reducer's finish() on that
// rank but mid-backward on the others, so SyncBatchNorm's all-reduces fall on different sides of
// it. Under the launch-completion order (runtime and driver ≥ 12.3: every CUDA 13 build) both
// kernels are resident side by side and neither waits for the other to finish, so that is harmless;
// where NCCL serialises instead (an older CUDA) such a run could deadlock (CUDA graphs, the other
// serialising case, refuse find_unused_parameters). A group created with
// `shares_gpu_with_other_groups` (every NCCL group of a run with synchronised BatchNorm:
// launch/main.cpp) sets the variable to 1 when the environment leaves it unset or empty, before its
// communicator exists, and refuses an NCCL older than 2.26 or an environment value NCCL reads as 0,
// with a message saying what to change. (A 0 from an NCCL config file — NCCL_CONF_FILE,
// ~/.nccl.conf, /etc/nccl.conf — is applied by NCCL later and only where the variable is unset, so
// ours wins there.) A single communicator (the default run) is ordered by its one stream and pays
// nothing. A one-rank communicator never reads the variable (NCCL runs its collectives as local
// copies or scalings on the user's stream), so only a run on ≥ 2 GPUs exercises this.
//
// NCCL does not check that ranks agree on a collective (the MPI backend does, NOTE [ MPI
// communication thread ]): ranks issuing different collectives, or one rank skipping one, hang
// until the timeout and the message names this rank's collective only. Diagnose with the MPI
// backend, whose agreement check names every rank's.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/mpi/mpi_environment.h"
#include "comm/process_group.h"
#include "runtime/core/device.h"

struct CUstream_st;  // cudaStream_t
struct CUevent_st;   // cudaEvent_t

namespace dp {

namespace cuda {
class CudaBackend;
}

struct NcclProcessGroupOptions {
  // A collective running for longer than this, or a communicator that stays busy (ncclInProgress)
  // this long while being created, launching a collective or being finalised, aborts the
  // communicator (NOTE [ NCCL errors and abort ]). Zero: no timeout; asynchronous errors still abort.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // Other NCCL groups of this process run collectives on the same GPU at the same time
  // (SyncBatchNorm's beside the gradients'): NOTE [ Several communicators on one GPU ]. Set it on
  // every such group, all created before the first collective.
  bool shares_gpu_with_other_groups = false;
};

// NOTE [ Several communicators on one GPU ]: whether this process must set
// NCCL_LAUNCH_ORDER_IMPLICIT=1 itself, given the variable's value (null when unset) and the loaded
// NCCL's version code (ncclGetVersion, e.g. 22809); throws a dp::Error saying what to change when
// the launches cannot be ordered (NCCL older than 2.26, or the variable set to 0 or to something
// NCCL does not read as a number).
bool must_set_implicit_launch_order(const char* value, int nccl_version);

struct NcclGroupState;  // shared by the group, its Works and its watchdog (nccl_process_group.cpp)

// The Work of an NcclProcessGroup collective (NOTE [ NCCL streams and waits ]).
class NcclWork final : public Work {
 public:
  ~NcclWork() override;

  // True once the collective has run on the communication stream, or has failed.
  bool is_completed() const override;
  // Stream-ordered: throws if the collective has failed, else makes the compute stream wait for
  // it and returns without blocking the host. For barrier(), the same as synchronize().
  void wait() override;
  // Blocks the host until the collective has run, polling NCCL for asynchronous errors; throws
  // the collective's failure, if any (a hang ends at the watchdog's timeout). Refused for a
  // captured collective (NOTE [ Collectives in CUDA graphs ]).
  void synchronize();
  // Recorded into a CUDA graph rather than run (NOTE [ Collectives in CUDA graphs ]).
  bool captured() const override { return captured_; }
  // From `first`'s `ready` to this collective's `done` (both on the device's clock: events with
  // timing, except in a capture); nullopt until `done` has passed, for a captured or failed
  // collective, and for a `first` of another group.
  std::optional<double> device_ms_since_ready_of(const Work& first) const override;

 private:
  friend class NcclProcessGroup;
  friend struct NcclGroupState;
  NcclWork(uint64_t sequence, const CollectiveFingerprint& fingerprint, std::shared_ptr<NcclGroupState> state,
           CUstream_st* compute_stream, bool host_wait);
  bool done_passed() const;  // cudaEventQuery(done_); a CUDA error counts as passed (wait() reports it)

  std::shared_ptr<NcclGroupState> state_;
  CUstream_st* compute_stream_;
  const bool host_wait_;          // barrier: wait() blocks the host
  bool captured_ = false;         // NOTE [ Collectives in CUDA graphs ]
  CUevent_st* ready_ = nullptr;   // on the compute stream, before the collective
  CUevent_st* done_ = nullptr;    // on the communication stream, after it
  bool timed_ = false;            // ready_ and done_ record times (not in a capture, not a replay)
  std::string error_;             // guarded by the state's mutex; non-empty: failed
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  // Collective over all ranks of `mpi`'s world (every rank creates its groups in the same order):
  // rank 0 creates the NCCL unique id, MPI_Bcast sends it to every rank, and each creates its
  // communicator on `gpu`, which must be a CUDA device of this process's Runtime (its backend's
  // stream is the compute stream) and a different GPU on every rank of a node. The broadcast runs
  // on the calling thread: under MPI_THREAD_SERIALIZED, create NCCL groups while no
  // MpiProcessGroup exists. `mpi` is needed only here; `gpu`'s backend must outlive the group.
  NcclProcessGroup(MpiEnvironment& mpi, Device gpu, NcclProcessGroupOptions options = {});
  // Waits for every collective already submitted (the other ranks expect them; a hang ends at the
  // timeout), then finalises and destroys the communicator (or has aborted it), and destroys the
  // communication stream.
  ~NcclProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "nccl"; }
  bool times_on_device() const override { return true; }

  WorkPtr all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag = kNoTag) override;
  WorkPtr broadcast(const Tensor& tensor, int root, int64_t tag = kNoTag) override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output, int64_t tag = kNoTag) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, CollectiveReduce op,
                         int64_t tag = kNoTag) override;
  // A one-element all-reduce on the communication stream; its wait() blocks the host.
  WorkPtr barrier(int64_t tag = kNoTag) override;

  // NOTE [ Collectives in CUDA graphs ]
  bool captures_collectives() const override { return true; }
  WorkPtr replay_graph(const std::function<void()>& launch, int64_t collectives, int64_t tag = kNoTag) override;

  // Blocks the host until every collective submitted so far (and every graph replay queued
  // through replay_graph()) has run; throws the group's first failure, if any. Refused during a
  // CUDA graph capture of the compute stream.
  void synchronize();

  Device device() const { return gpu_; }
  CUstream_st* communication_stream() const { return comm_stream_; }  // a cudaStream_t

 private:
  // Queues one collective (NOTE [ NCCL streams and waits ]); `input`/`output` are kept until it
  // has run.
  WorkPtr submit(const CollectiveFingerprint& fingerprint, const Tensor& input, const Tensor& output,
                 bool host_wait);
  // A new Work with the next sequence number, already failed when the group is broken.
  // `capturing`: the compute stream is being captured (NOTE [ Collectives in CUDA graphs ]).
  std::shared_ptr<NcclWork> open_work_locked(const CollectiveFingerprint& fingerprint, bool host_wait,
                                             bool capturing);
  // The group is broken (state's failure): `work` fails without running, "not run, <why>: <failure>".
  void mark_not_run_locked(NcclWork& work, const char* why);
  // `work`'s launch failed: it fails with `e` and the group is broken.
  void fail_launch_locked(NcclWork& work, const std::exception& e);
  // The NCCL call of one collective on the communication stream, waited for until NCCL has
  // launched it; throws what NCCL reports. Under the state's mutex.
  void launch_collective_locked(const CollectiveFingerprint& fingerprint, const Tensor& input, const Tensor& output);
  // Hands a launched `work` to the watchdog (or logs it captured); fails it if the group broke
  // meanwhile. `input`/`output` are held until it has run.
  void watch_launched_locked(const std::shared_ptr<NcclWork>& work, const Tensor& input, const Tensor& output);
  std::string where(const char* op) const;  // "NcclProcessGroup::all_gather on rank 1 of 4"
  // role: "tensor", "input" or "output", as the message names it.
  void check_tensor(const char* op, const char* role, const Tensor& tensor) const;
  void check_reduction(const char* op, DType dtype, CollectiveReduce reduce) const;
  void activate() const;  // makes the group's GPU current on the calling thread
  void run_watchdog();
  void shut_down() noexcept;  // the destructor's work; also undoes a constructor that failed late

  Device gpu_;
  cuda::CudaBackend& backend_;
  const NcclProcessGroupOptions options_;
  int rank_ = -1, size_ = 0;
  std::shared_ptr<NcclGroupState> state_;
  // Held by submit() and replay_graph() throughout (NOTE [ The watchdog never waits for a launch ]);
  // taken before the state's mutex, never by the watchdog.
  std::mutex launch_mutex_;
  CUstream_st* comm_stream_ = nullptr;
  Tensor barrier_buffer_;  // one float32 zero, all-reduced by barrier()
  std::thread watchdog_;
};

}  // namespace dp
