#include "comm/mpi/mpi_watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <vector>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/wire_fingerprint.h"
#include "comm/process_group.h"

namespace dp {
namespace {

constexpr int kQueryTag = 1;  // payload: the asker's stuck sequence number (informational)
constexpr int kReplyTag = 2;  // payload: MpiWatchdog::Report
// How long MPI_Abort may take to end this process before it _exits on its own.
constexpr std::chrono::seconds kAbortBackstop{10};

int64_t milliseconds(MpiWatchdog::Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

std::string seconds_text(int64_t ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", static_cast<double>(ms) / 1000.0);
  return text;
}

void warn_on_mpi_error(int rc, int rank, const char* call) {
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "dptrain watchdog: rank %d: %s failed while shutting down: %s\n", rank,
                 call, mpi_error_text(rc).c_str());
  }
}

}  // namespace

// Fixed layout, sent as MPI_BYTE; value-initialised so that padding is zero.
struct MpiWatchdog::Report {
  uint64_t issued = 0;    // collectives #0 .. #issued-1 have been issued
  uint64_t finished = 0;  // and this many have finished
  int64_t running_ms = 0;
  int64_t idle_ms = 0;    // since the last collective was issued (or the group was created)
  int32_t is_running = 0;
  int32_t has_last = 0;
  WireFingerprint running{};  // valid if is_running
  WireFingerprint last{};     // the last issued, valid if has_last
};

struct MpiWatchdog::PendingReply {
  MPI_Request request = MPI_REQUEST_NULL;
  Report report;  // the send's buffer: lives until the send completes
};

MpiWatchdog::MpiWatchdog(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout,
                         std::chrono::milliseconds checkpoint_wait_timeout)
    : comm_(comm),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      checkpoint_wait_timeout_(checkpoint_wait_timeout),
      // Fine enough to keep the timeout accurate, coarse enough to cost nothing (one MPI_Test).
      poll_(std::clamp(timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(100))),
      grace_(std::clamp(timeout / 10, std::chrono::milliseconds(1000), std::chrono::milliseconds(10000))),
      last_issued_at_(Clock::now()),
      talking_(comm != MPI_COMM_NULL && size > 1) {
  try {
    DP_CHECK(timeout.count() > 0, "MpiWatchdog: the timeout must be positive (got ", timeout.count(), " ms)");
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);  // best effort: already failing
    throw;
  }
}

MpiWatchdog::~MpiWatchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  // The thread's MPI state is ours now. An unanswered query receive must not outlive its buffer.
  if (query_request_ != MPI_REQUEST_NULL) {
    warn_on_mpi_error(MPI_Cancel(&query_request_), rank_, "MPI_Cancel of the progress-query receive");
    warn_on_mpi_error(MPI_Wait(&query_request_, MPI_STATUS_IGNORE), rank_,
                      "MPI_Wait of the cancelled progress-query receive");
  }
  // Answers are a few dozen bytes and leave eagerly; give stragglers a moment, then let MPI finish
  // them on its own and leak their buffers rather than free memory a send may still read.
  for (int attempt = 0; attempt < 100 && !replies_.empty(); ++attempt) {
    serve_queries();
    if (!replies_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (std::unique_ptr<PendingReply>& reply : replies_) {
    warn_on_mpi_error(MPI_Request_free(&reply->request), rank_, "MPI_Request_free of a progress answer");
    (void)reply.release();
  }
  if (comm_ != MPI_COMM_NULL) {
    warn_on_mpi_error(MPI_Comm_free(&comm_), rank_, "MPI_Comm_free of the watchdog's communicator");
  }
}

void MpiWatchdog::issued(uint64_t sequence, const CollectiveFingerprint& fingerprint) {
  std::lock_guard lock(mutex_);
  issued_ = sequence + 1;
  last_issued_ = fingerprint;
  last_issued_at_ = Clock::now();
}

void MpiWatchdog::started(uint64_t sequence, const CollectiveFingerprint& fingerprint) {
  std::lock_guard lock(mutex_);
  running_ = sequence;
  running_fingerprint_ = fingerprint;
  running_since_ = Clock::now();
}

void MpiWatchdog::finished(uint64_t sequence) {
  std::lock_guard lock(mutex_);
  running_.reset();
  finished_ = sequence + 1;
}

void MpiWatchdog::run() {
  pthread_setname_np(pthread_self(), "dp-mpi-watchdog");  // visible in top/gdb; failure is harmless
  if (talking_) post_query_receive();
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, poll_);
    if (stopping_) break;
    std::optional<Stuck> stuck;
    // The barrier after a checkpoint write waits on rank 0's file system: its own limit (0: none).
    const std::chrono::milliseconds limit =
        running_ && running_fingerprint_.tag == kCheckpointWaitTag ? checkpoint_wait_timeout_ : timeout_;
    if (const Clock::time_point now = Clock::now();
        running_ && limit.count() > 0 && now - running_since_ >= limit) {
      stuck = Stuck{*running_, running_fingerprint_, now - running_since_, limit};
    }
    lock.unlock();
    serve_queries();
    if (stuck) abort_job(*stuck);
    lock.lock();
  }
}

MpiWatchdog::Report MpiWatchdog::report_locked(Clock::time_point now) const {
  Report report{};
  report.issued = issued_;
  report.finished = finished_;
  report.idle_ms = milliseconds(now - last_issued_at_);
  if (running_) {
    report.is_running = 1;
    report.running = WireFingerprint::from(*running_, running_fingerprint_);
    report.running_ms = milliseconds(now - running_since_);
  }
  if (last_issued_) {
    report.has_last = 1;
    report.last = WireFingerprint::from(issued_ - 1, *last_issued_);
  }
  return report;
}

void MpiWatchdog::stop_talking(const std::string& why) {
  talking_ = false;
  std::fprintf(stderr, "dptrain watchdog: rank %d: %s; this rank can no longer exchange progress "
                       "with the others (its timeout still applies)\n", rank_, why.c_str());
}

void MpiWatchdog::post_query_receive() {
  const int rc =
      MPI_Irecv(&query_buffer_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, kQueryTag, comm_, &query_request_);
  if (rc != MPI_SUCCESS) stop_talking("MPI_Irecv of progress queries failed: " + mpi_error_text(rc));
}

void MpiWatchdog::serve_queries() {
  while (talking_ && query_request_ != MPI_REQUEST_NULL) {
    int arrived = 0;
    MPI_Status status;
    if (int rc = MPI_Test(&query_request_, &arrived, &status); rc != MPI_SUCCESS) {
      return stop_talking("MPI_Test of the progress-query receive failed: " + mpi_error_text(rc));
    }
    if (!arrived) break;
    auto reply = std::make_unique<PendingReply>();
    {
      std::lock_guard lock(mutex_);
      reply->report = report_locked(Clock::now());
    }
    if (int rc = MPI_Isend(&reply->report, sizeof(Report), MPI_BYTE, status.MPI_SOURCE, kReplyTag,
                           comm_, &reply->request);
        rc != MPI_SUCCESS) {
      return stop_talking("MPI_Isend of this rank's progress to rank " + std::to_string(status.MPI_SOURCE) +
                          " failed: " + mpi_error_text(rc));
    }
    replies_.push_back(std::move(reply));
    post_query_receive();
  }
  for (auto it = replies_.begin(); it != replies_.end();) {
    int sent = 0;
    if (int rc = MPI_Test(&(*it)->request, &sent, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
      (void)it->release();  // MPI may still own the buffer
      replies_.erase(it);
      return stop_talking("MPI_Test of a progress answer failed: " + mpi_error_text(rc));
    }
    it = sent ? replies_.erase(it) : std::next(it);
  }
}

std::string MpiWatchdog::describe(int peer, const Report& report, const Stuck& stuck, bool* stalled) const {
  const uint64_t n = stuck.sequence;
  std::string line = "  rank " + std::to_string(peer) + ": ";
  if (report.is_running) {
    const uint64_t r = report.running.sequence;
    const std::string what = "#" + std::to_string(r) + " " + report.running.fingerprint().str();
    if (r == n) {
      line += "also waiting, in " + what + " for " + seconds_text(report.running_ms);
      if (!(report.running.fingerprint() == stuck.fingerprint)) line += " (a different collective: desync)";
    } else if (r < n) {
      *stalled = true;
      line += "behind: still inside " + what + " after " + seconds_text(report.running_ms) +
              "; it has not reached #" + std::to_string(n);
    } else {
      line += "ahead: inside " + what + " for " + seconds_text(report.running_ms);
    }
  } else if (report.issued <= n) {
    *stalled = true;
    line += "alive, but has not issued #" + std::to_string(n) + "; ";
    if (report.has_last) {
      line += "its last collective is #" + std::to_string(report.last.sequence) + " " +
              report.last.fingerprint().str() + ", issued " + seconds_text(report.idle_ms) + " ago";
    } else {
      line += "it has issued no collective in the " + seconds_text(report.idle_ms) +
              " since the group was created";
    }
  } else {
    line += "ahead: has issued " + std::to_string(report.issued) + " collective(s), finished " +
            std::to_string(report.finished) + ", none running";
  }
  return line;
}

void MpiWatchdog::abort_job(const Stuck& stuck) {
  // Ask every other rank for its progress, and wait up to grace_ for the answers.
  std::vector<Report> answers(static_cast<size_t>(size_));
  std::vector<bool> answered(static_cast<size_t>(size_), false);
  std::vector<std::string> errors(static_cast<size_t>(size_));
  std::vector<MPI_Request> receives(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  std::vector<MPI_Request> queries(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  const uint64_t asked = stuck.sequence;
  const char* unknown_why = comm_ == MPI_COMM_NULL
                                ? "this MPI lacks MPI_THREAD_MULTIPLE, so the watchdog cannot ask them"
                            : size_ == 1 ? "the group has no other rank"
                                         : "an MPI error stopped the watchdog from asking them";
  const bool asking = talking_;
  if (asking) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto i = static_cast<size_t>(r);
      int rc = MPI_Irecv(&answers[i], sizeof(Report), MPI_BYTE, r, kReplyTag, comm_, &receives[i]);
      if (rc == MPI_SUCCESS) rc = MPI_Isend(&asked, 1, MPI_UINT64_T, r, kQueryTag, comm_, &queries[i]);
      if (rc != MPI_SUCCESS) errors[i] = "could not be asked: " + mpi_error_text(rc);
    }
    const Clock::time_point deadline = Clock::now() + grace_;
    for (;;) {
      bool waiting = false;
      for (int r = 0; r < size_; ++r) {
        const auto i = static_cast<size_t>(r);
        if (r == rank_ || answered[i] || !errors[i].empty()) continue;
        int done = 0;
        if (int rc = MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
          errors[i] = "its answer failed: " + mpi_error_text(rc);
        } else if (done) {
          answered[i] = true;
        } else {
          waiting = true;
        }
      }
      if (!waiting || Clock::now() >= deadline) break;
      serve_queries();  // ranks that time out at the same moment ask this one too
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  const int64_t waited_ms = milliseconds(stuck.waited);
  const std::string collective = "#" + std::to_string(stuck.sequence) + " " + stuck.fingerprint.str();
  std::string details = "  rank " + std::to_string(rank_) + ": waiting in " + collective + " for " +
                        seconds_text(waited_ms) + "  <- this rank\n";
  std::vector<int> blamed;
  for (int r = 0; r < size_ && asking; ++r) {
    const auto i = static_cast<size_t>(r);
    if (r == rank_) continue;
    bool stalled = false;
    if (answered[i]) {
      details += describe(r, answers[i], stuck, &stalled) + "\n";
    } else {
      stalled = true;
      details += "  rank " + std::to_string(r) + ": " +
                 (errors[i].empty() ? "no answer within " + seconds_text(milliseconds(grace_)) +
                                          ": its process has died (killed or crashed) or is frozen"
                                    : errors[i]) + "\n";
    }
    if (stalled) blamed.push_back(r);
  }
  std::string verdict;
  if (!asking) {
    verdict = std::string("the other ranks' progress is unknown (") + unknown_why + ")";
  } else if (blamed.empty()) {
    verdict = "every rank is inside it, so MPI itself is not completing it";
  } else {
    verdict = blamed.size() == 1 ? "rank " : "ranks ";
    for (size_t k = 0; k < blamed.size(); ++k) verdict += (k ? ", " : "") + std::to_string(blamed[k]);
    verdict += " stopped making progress";
  }
  const std::string message = "dptrain watchdog: rank " + std::to_string(rank_) + " of " +
                              std::to_string(size_) + ": collective " + collective +
                              " has not completed after " + seconds_text(waited_ms) + " (timeout " +
                              seconds_text(stuck.limit.count()) +
                              (stuck.fingerprint.tag == kCheckpointWaitTag
                                   ? ", waiting for rank 0 to write a checkpoint: distributed.checkpoint_timeout_s"
                                   : "") +
                              "); " + verdict + ". Aborting the job.\n" +
                              details;
  std::fputs(message.c_str(), stderr);  // one write, so ranks' messages do not interleave by line
  std::fflush(stderr);

  std::thread([rank = rank_] {
    std::this_thread::sleep_for(kAbortBackstop);
    std::fprintf(stderr, "dptrain watchdog: rank %d: MPI_Abort did not end the process in %lld s; exiting\n",
                 rank, static_cast<long long>(kAbortBackstop.count()));
    std::_Exit(kExitCode);
  }).detach();
  const int rc = MPI_Abort(MPI_COMM_WORLD, kExitCode);
  std::fprintf(stderr, "dptrain watchdog: rank %d: MPI_Abort returned (%s); exiting\n", rank_,
               mpi_error_text(rc).c_str());
  std::_Exit(kExitCode);
}

}  // namespace dp
