// MpiProcessGroup: the ProcessGroup for CPU tensors over MPI.
//
// NOTE [ MPI communication thread ]
// Open MPI makes progress on a non-blocking collective only while some thread is inside MPI, so
// MPI_Iallreduce issued from the training thread would sit idle during backward. Instead each
// group owns one communication thread that takes submitted collectives from a queue, in
// submission order, and runs each as a BLOCKING MPI call on the group's own communicator (a
// duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN). That thread is the only one that calls MPI
// for the group's collectives, from creating its communicator to freeing it; the group's watchdog
// (NOTE [ MPI watchdog ] in comm/mpi/mpi_watchdog.h) talks on a communicator of its own, which the
// communication thread creates in the same order on every rank. Every MPI return code is checked;
// a failure fails that collective's Work and breaks the group (NOTE [ Process group contract ]).
//
// Agreement check (on by default): before each collective the ranks all-reduce a 64-bit digest
// of (sequence number, fingerprint). When ranks disagree — different sizes, dtypes, ops, tags, or
// a skipped collective shifting the sequence — every rank sees it, skips the collective and fails
// its Work with each rank's fingerprint, instead of hanging or corrupting memory inside MPI. It
// costs one 16-byte all-reduce per collective. With it off, mismatched collectives are undefined
// behaviour in MPI.
//
// Float16/bfloat16 reductions: NOTE [ 16-bit sums over MPI ] in comm/mpi/mpi_reduce_ops.h.
//
// NOTE [ Rank-ordered sums ]
// MPI_Allreduce may add the ranks' values in any order, and the order may change with the message
// size, the number of ranks, the process placement or an MCA parameter, so float results can
// differ in the last bits between two launches of the same job. With rank_ordered_sums, all-reduce
// and reduce-scatter run as an all-to-all of chunks (rank r receives chunk r of every rank), a sum
// of each chunk in rank order, ((x0 + x1) + x2) + ..., with the same MPI_SUM or 16-bit op through
// MPI_Reduce_local, and, for all-reduce, an all-gather of the summed chunks. The bits then depend
// only on the values and the number of ranks, and every rank receives the same bits. It moves as
// many bytes as a ring all-reduce but costs more latency: it is dptrain's deterministic mode
// (run.deterministic), not the default.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_reduce_ops.h"
#include "comm/mpi/mpi_watchdog.h"
#include "comm/process_group.h"

namespace dp {

struct MpiProcessGroupOptions {
  bool check_agreement = true;  // see "Agreement check" above
  // A collective inside MPI for longer than this aborts the job, naming the ranks that stopped
  // making progress (NOTE [ MPI watchdog ]). Zero disables the watchdog.
  std::chrono::milliseconds watchdog_timeout = std::chrono::seconds(300);
  // The same for the barrier tagged kCheckpointWaitTag (the others waiting for rank 0's checkpoint
  // write); zero: no limit for it.
  std::chrono::milliseconds checkpoint_wait_timeout = std::chrono::hours(1);
  bool rank_ordered_sums = false;  // NOTE [ Rank-ordered sums ]
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Collective over all ranks of `mpi`'s world: every rank creates its groups in the same order.
  // `mpi` must outlive the group.
  explicit MpiProcessGroup(MpiEnvironment& mpi, MpiProcessGroupOptions options = {});
  // Runs every collective already submitted (the other ranks expect them), then stops the
  // communication thread and frees the communicator.
  ~MpiProcessGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend_name() const override { return "mpi"; }

  WorkPtr all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag = kNoTag) override;
  WorkPtr broadcast(const Tensor& tensor, int root, int64_t tag = kNoTag) override;
  WorkPtr all_gather(const Tensor& input, const Tensor& output, int64_t tag = kNoTag) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output, CollectiveReduce op,
                         int64_t tag = kNoTag) override;
  WorkPtr barrier(int64_t tag = kNoTag) override;

 private:
  class MpiWork;
  struct QueuedCollective {
    std::shared_ptr<MpiWork> work;
    Tensor input, output;  // held until the collective ends so their storage stays alive
  };

  WorkPtr submit(const CollectiveFingerprint& fingerprint, Tensor input, Tensor output);
  std::string where(const char* op) const;  // "MpiProcessGroup::all_gather on rank 1 of 4"
  // role: "tensor", "input" or "output", as the message names it.
  void check_tensor(const char* op, const char* role, const Tensor& tensor) const;

  void stop_communication_thread();  // after running everything submitted

  // Communication thread.
  void run_communication_thread(std::promise<void>& setup_done);
  void run_collective(QueuedCollective& item);
  void check_ranks_agree(uint64_t sequence, const CollectiveFingerprint& fingerprint);
  void execute(const CollectiveFingerprint& fingerprint, const Tensor& input, const Tensor& output);
  // NOTE [ Rank-ordered sums ]: `in` holds size_ chunks of counts[r] elements; rank r receives
  // chunk r of every rank and writes their rank-ordered sum to `out` (counts[rank_] elements).
  void rank_ordered_reduce_scatter(const void* in, void* out, const std::vector<int>& counts, DType dtype);
  std::string context(uint64_t sequence, const CollectiveFingerprint& fingerprint) const;

  MpiEnvironment& mpi_;
  const MpiProcessGroupOptions options_;
  int rank_ = -1, size_ = 0;

  // Owned by the communication thread once it runs.
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm watchdog_comm_ = MPI_COMM_NULL;  // created there, then handed to watchdog_
  std::optional<MpiReduceOps> reduce_ops_;
  std::string first_failure_;  // non-empty once a collective has failed: the group is broken
  std::vector<char> chunks_;   // rank-ordered sums: every rank's copy of this rank's chunk

  std::mutex queue_mutex_;  // guards queue_ and stopping_; also orders sequence numbers
  std::condition_variable queue_ready_;
  std::deque<QueuedCollective> queue_;
  bool stopping_ = false;
  std::thread thread_;
  // Set before the first submission, reset after the communication thread has stopped.
  std::unique_ptr<MpiWatchdog> watchdog_;
};

}  // namespace dp
