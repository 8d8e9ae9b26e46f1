// MpiWatchdog: turns a collective that never completes into a job abort that says who is to blame.
//
// NOTE [ MPI watchdog ]
// Why: when a rank dies, stalls (stuck in compute, deadlocked) or skips a collective, the others
// block inside MPI forever. mpirun kills the job when a process dies by a signal, but it cannot see
// a live rank that stopped issuing collectives, and a launcher that does not kill the job on one
// task's death (srun without --kill-on-bad-exit, mpirun --mca orte_abort_on_non_zero_status 0)
// leaves the survivors hanging in shared-memory or TCP transfers that never fail.
//
// What: each MpiProcessGroup owns one watchdog thread. The group reports when each collective is
// issued, starts running on the communication thread, and finishes. The watchdog wakes every
// poll interval; when the running collective has been inside MPI for longer than the timeout
// (time queued behind an earlier collective does not count: that one is the stuck one) it
//   1. asks every other rank of the group for its progress (point-to-point on its own
//      communicator, so the queries never match a collective's messages nor wait behind them),
//   2. waits a short grace period for the answers (every live rank's watchdog answers within a
//      poll interval, busy or idle, since it is a thread of its own),
//   3. writes ONE message to stderr: this rank, the stuck collective (#sequence and fingerprint),
//      how long it waited, and each rank's state — still waiting in the same collective; alive but
//      never issued it (stalled); behind or ahead; or no answer (the process is dead or frozen) —
//      naming the ranks that stopped making progress,
//   4. calls MPI_Abort(MPI_COMM_WORLD), which makes the launcher kill every rank; a backstop
//      thread _exits the process if MPI_Abort itself hangs.
// A timeout is never recovered from: once a rank has asked, it aborts. So the protocol has no
// false-alarm path, and a rank that is merely slow is named as stalled; hence the generous default
// (300 s, MpiProcessGroupOptions::watchdog_timeout).
//
// MPI threads: the watchdog calls MPI from its own thread concurrently with the communication
// thread, which MPI allows only at MPI_THREAD_MULTIPLE. With less (MPI_THREAD_SERIALIZED), it gets
// no communicator, asks no one, and its message says other ranks' progress is unknown; it still
// aborts. Each rank that times out prints its own message: with one dead rank out of three, both
// survivors do.
#pragma once

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/collective_log.h"

namespace dp {

class MpiWatchdog {
 public:
  using Clock = std::chrono::steady_clock;

  // `comm`: the watchdog's own communicator, with the group's ranks (a duplicate of the group's),
  // now owned and freed by the watchdog; MPI_COMM_NULL when MPI lacks MPI_THREAD_MULTIPLE.
  // `timeout` must be positive. Starts the thread.
  // `checkpoint_wait_timeout` applies instead to a collective tagged kCheckpointWaitTag (zero: no
  // limit for it).
  MpiWatchdog(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout,
              std::chrono::milliseconds checkpoint_wait_timeout = std::chrono::hours(1));
  // Stops the thread and frees the communicator. Destroy it after the communication thread has
  // stopped, so that the collectives run at the group's destruction are still watched.
  ~MpiWatchdog();
  MpiWatchdog(const MpiWatchdog&) = delete;
  MpiWatchdog& operator=(const MpiWatchdog&) = delete;

  // The group's progress: issued in sequence order (under the group's submission lock), started
  // and finished one at a time by the communication thread.
  void issued(uint64_t sequence, const CollectiveFingerprint& fingerprint);
  void started(uint64_t sequence, const CollectiveFingerprint& fingerprint);
  void finished(uint64_t sequence);

  // The exit status of a process the watchdog aborts (MPI_Abort's error code).
  static constexpr int kExitCode = 1;

 private:
  struct Report;  // one rank's progress, as sent to a rank that asks
  struct PendingReply;
  struct Stuck {
    uint64_t sequence;
    CollectiveFingerprint fingerprint;
    Clock::duration waited;
    std::chrono::milliseconds limit;  // the timeout it ran past
  };

  void run();
  Report report_locked(Clock::time_point now) const;
  void post_query_receive();
  void serve_queries();  // answers the queries that arrived, and retires sent answers
  void stop_talking(const std::string& why);
  [[noreturn]] void abort_job(const Stuck& stuck);
  std::string describe(int peer, const Report& report, const Stuck& stuck, bool* stalled) const;

  MPI_Comm comm_;
  const int rank_, size_;
  const std::chrono::milliseconds timeout_, checkpoint_wait_timeout_, poll_, grace_;

  // Progress, guarded by mutex_; so is stopping_.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  uint64_t issued_ = 0, finished_ = 0;
  std::optional<CollectiveFingerprint> last_issued_;
  Clock::time_point last_issued_at_;  // creation time until something is issued
  std::optional<uint64_t> running_;
  CollectiveFingerprint running_fingerprint_;
  Clock::time_point running_since_;

  // The watchdog thread's own: MPI state for answering queries.
  bool talking_ = false;  // comm_ usable; false after an MPI error in the watchdog
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  uint64_t query_buffer_ = 0;
  std::deque<std::unique_ptr<PendingReply>> replies_;

  std::thread thread_;
};

}  // namespace dp
