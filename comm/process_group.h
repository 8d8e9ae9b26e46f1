// ProcessGroup: the collectives data-parallel training needs, asynchronous, on one group of ranks.
//
// NOTE [ Process group contract ]
// - Every rank of a group must issue the same collectives in the same order. Submission order is
//   launch order: a backend runs a group's collectives one after another, in the order they were
//   submitted (the MPI backend on its communication thread, NCCL on its stream).
// - Each call returns at once with a Work handle. The tensors belong to the collective until its
//   Work completes: do not read or write them before wait() returns (the Work keeps them alive).
// - Tensors must be contiguous, on the device the backend serves, and of one dtype per call.
//   Argument errors that a rank can see alone (wrong device, non-contiguous, output too small,
//   a root outside the group) throw dp::Error from the call itself. Errors found while running
//   the collective (ranks disagreeing on it, an MPI failure) are thrown from Work::wait().
// - Every collective gets the group's next sequence number (0, 1, 2, ...) and a fingerprint
//   (op, reduction, dtype, element count, root, caller tag such as a bucket index). Both are kept
//   in the group's CollectiveLog so that ranks can compare what they issued (desync detection).
// - After a collective fails, the group is broken: later collectives fail with the first error.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/collective_log.h"
#include "runtime/tensor/tensor.h"

namespace dp {

// Handle to one submitted collective.
class Work {
 public:
  Work(uint64_t sequence, CollectiveFingerprint fingerprint)
      : sequence_(sequence), fingerprint_(fingerprint) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once the collective has finished, successfully or not; wait() then does not block.
  virtual bool is_completed() const = 0;
  // Blocks until the collective has finished; throws dp::Error with its failure, if any.
  // NCCL: stream-ordered instead — the compute stream waits for the collective and the host
  // returns at once (NOTE [ NCCL streams and waits ] in comm/nccl/nccl_process_group.h).
  virtual void wait() = 0;

  uint64_t sequence() const { return sequence_; }
  const CollectiveFingerprint& fingerprint() const { return fingerprint_; }
  // Recorded into a CUDA graph rather than run (NOTE [ Collectives in CUDA graphs ] in
  // comm/nccl/nccl_process_group.h): it never completes and has no time of its own.
  virtual bool captured() const { return false; }
  // Groups that time collectives on the device (ProcessGroup::times_on_device): milliseconds of
  // device time from the moment `first`'s inputs were ready — the compute stream passed the point
  // where `first` was submitted — to the end of this collective. nullopt when it is not known: a
  // host backend, a captured or failed collective, or one the device has not run yet (it never
  // waits). NOTE [ Communication timed on the device ] in comm/ddp/reducer.h.
  virtual std::optional<double> device_ms_since_ready_of(const Work& first) const {
    (void)first;
    return std::nullopt;
  }

 private:
  uint64_t sequence_;
  CollectiveFingerprint fingerprint_;
};

using WorkPtr = std::shared_ptr<Work>;

// No tag: the collective is not tied to a bucket or other caller-side index.
inline constexpr int64_t kNoTag = -1;
// The barrier every rank enters after rank 0 writes a checkpoint (its file system may take
// minutes): the MPI watchdog gives it its own timeout (MpiProcessGroupOptions::checkpoint_wait_timeout),
// so a long save is not taken for a stalled rank.
inline constexpr int64_t kCheckpointWaitTag = -6;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend_name() const = 0;  // "mpi", "nccl"
  // Whether collectives run on a device stream and their Works measure device time
  // (Work::device_ms_since_ready_of): NCCL. The MPI backend's run on the host, timed by its clock.
  virtual bool times_on_device() const { return false; }

  // In place: every rank's `tensor` becomes the sum (or mean) over ranks.
  virtual WorkPtr all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag = kNoTag) = 0;
  // In place: every rank's `tensor` becomes rank `root`'s.
  virtual WorkPtr broadcast(const Tensor& tensor, int root, int64_t tag = kNoTag) = 0;
  // `output` (size() × input.numel() elements) receives every rank's `input`, in rank order.
  virtual WorkPtr all_gather(const Tensor& input, const Tensor& output, int64_t tag = kNoTag) = 0;
  // `input` (size() × output.numel() elements) is reduced over ranks; rank r keeps chunk r.
  virtual WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, CollectiveReduce op,
                                 int64_t tag = kNoTag) = 0;
  // Completes once every rank has reached it (and every earlier collective of this group has run).
  virtual WorkPtr barrier(int64_t tag = kNoTag) = 0;

  // CUDA graphs (NOTE [ Collectives in CUDA graphs ] in comm/nccl/nccl_process_group.h).
  // Whether a collective submitted while the compute stream is being captured is recorded into
  // the graph (the MPI backend runs on the host: it cannot).
  virtual bool captures_collectives() const { return false; }
  // Queues one replay of a graph that holds `collectives` of this group's collectives, captured
  // earlier: `launch` queues the replay on the compute stream. The replay is logged and watched
  // like a collective of its own (fingerprint graph_replay); its Work's wait() throws when the
  // group has failed. Groups that do not capture collectives refuse.
  virtual WorkPtr replay_graph(const std::function<void()>& launch, int64_t collectives, int64_t tag = kNoTag);

  // What this rank has submitted: the most recent collectives with their sequence numbers.
  const CollectiveLog& log() const { return log_; }

 protected:
  ProcessGroup() = default;
  CollectiveLog log_;
};

}  // namespace dp
