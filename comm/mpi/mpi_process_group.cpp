#include "comm/mpi/mpi_process_group.h"

#include <pthread.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/wire_fingerprint.h"
#include "runtime/core/nvtx.h"

namespace dp {

// Completed by the communication thread; waited on by anyone.
class MpiProcessGroup::MpiWork final : public Work {
 public:
  using Work::Work;

  bool is_completed() const override {
    std::lock_guard lock(mutex_);
    return done_;
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    done_cv_.wait(lock, [this] { return done_; });
    if (!error_.empty()) throw Error(error_);
  }

  void finish(std::string error) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    done_cv_.notify_all();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
};

namespace {

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  auto* a0 = static_cast<const char*>(a.raw_data());
  auto* b0 = static_cast<const char*>(b.raw_data());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

int as_mpi_count(int64_t count) { return static_cast<int>(count); }  // range checked at submission

}  // namespace

MpiProcessGroup::MpiProcessGroup(MpiEnvironment& mpi, MpiProcessGroupOptions options)
    : mpi_(mpi), options_(options) {
  DP_CHECK(options_.checkpoint_wait_timeout.count() >= 0, "MpiProcessGroup: checkpoint_wait_timeout must be ",
           "positive, or zero for no limit (got ", options_.checkpoint_wait_timeout.count(), " ms)");
  DP_CHECK(options_.watchdog_timeout.count() >= 0, "MpiProcessGroup: watchdog_timeout must be "
           "positive, or zero to disable the watchdog (got ", options_.watchdog_timeout.count(), " ms)");
  mpi_.add_process_group();
  // Shared with the thread: it may still be inside set_value() when this constructor returns.
  auto setup_done = std::make_shared<std::promise<void>>();
  std::future<void> setup = setup_done->get_future();
  thread_ = std::thread([this, setup_done] { run_communication_thread(*setup_done); });
  try {
    setup.get();  // rethrows a failure to create the communicator; the thread has exited then
  } catch (...) {
    thread_.join();
    mpi_.remove_process_group();
    throw;
  }
  if (options_.watchdog_timeout.count() > 0) {
    try {
      watchdog_ = std::make_unique<MpiWatchdog>(std::exchange(watchdog_comm_, MPI_COMM_NULL), rank_, size_,
                                                options_.watchdog_timeout, options_.checkpoint_wait_timeout);
    } catch (...) {
      stop_communication_thread();
      mpi_.remove_process_group();
      throw;
    }
  }
}

MpiProcessGroup::~MpiProcessGroup() {
  stop_communication_thread();  // still watched: what it runs now may hang like any collective
  watchdog_.reset();
  mpi_.remove_process_group();
}

void MpiProcessGroup::stop_communication_thread() {
  {
    std::lock_guard lock(queue_mutex_);
    stopping_ = true;
  }
  queue_ready_.notify_one();
  thread_.join();
}

// ---- Submission (any thread) ----------------------------------------------------------------

std::string MpiProcessGroup::where(const char* op) const {
  return detail::concat("MpiProcessGroup::", op, " on rank ", rank_, " of ", size_);
}

void MpiProcessGroup::check_tensor(const char* op, const char* role, const Tensor& tensor) const {
  DP_CHECK(tensor.defined(), where(op), ": the ", role, " is undefined");
  DP_CHECK(tensor.device().is_cpu(), where(op), ": the ", role, " ",
           tensor.str(), " is not on the CPU; the MPI backend reduces host memory (use the NCCL "
           "backend for CUDA tensors)");
  DP_CHECK(tensor.is_contiguous(), where(op), ": the ", role, " ", tensor.str(),
           " is not contiguous; pass a contiguous tensor (such as a flat bucket)");
  DP_CHECK(tensor.numel() <= INT_MAX, where(op), ": the ", role, " ",
           tensor.str(), " has more than 2^31-1 elements, more than one MPI call can carry");
}

WorkPtr MpiProcessGroup::submit(const CollectiveFingerprint& fingerprint, Tensor input, Tensor output) {
  if (output.defined()) output.bump_version();  // written in place, asynchronously
  std::shared_ptr<MpiWork> work;
  {
    // One lock for numbering and queueing, so the queue is in sequence order.
    std::lock_guard lock(queue_mutex_);
    uint64_t sequence = log_.append(fingerprint);
    if (watchdog_) watchdog_->issued(sequence, fingerprint);
    work = std::make_shared<MpiWork>(sequence, fingerprint);
    queue_.push_back({work, std::move(input), std::move(output)});
  }
  queue_ready_.notify_one();
  return work;
}

WorkPtr MpiProcessGroup::all_reduce(const Tensor& tensor, CollectiveReduce op, int64_t tag) {
  check_tensor("all_reduce", "tensor", tensor);
  const char* why = nullptr;
  DP_CHECK(op != CollectiveReduce::None, where("all_reduce"), ": choose CollectiveReduce::Sum or CollectiveReduce::Average");
  DP_CHECK(mpi_reduction_supported(tensor.dtype(), op, &why), where("all_reduce"), ": ",
           collective_reduce_name(op), " of ", tensor.str(), ": ", why);
  return submit({CollectiveOp::AllReduce, op, tensor.dtype(), tensor.numel(), -1, tag}, tensor, tensor);
}

WorkPtr MpiProcessGroup::broadcast(const Tensor& tensor, int root, int64_t tag) {
  check_tensor("broadcast", "tensor", tensor);
  DP_CHECK(root >= 0 && root < size_, where("broadcast"), ": root ", root,
           " is not a rank of this group of ", size_);
  return submit({CollectiveOp::Broadcast, CollectiveReduce::None, tensor.dtype(), tensor.numel(), root, tag},
                tensor, tensor);
}

WorkPtr MpiProcessGroup::all_gather(const Tensor& input, const Tensor& output, int64_t tag) {
  check_tensor("all_gather", "input", input);
  check_tensor("all_gather", "output", output);
  DP_CHECK(input.dtype() == output.dtype(), where("all_gather"), ": input ", input.str(),
           " and output ", output.str(), " differ in dtype");
  DP_CHECK(output.numel() == size_ * input.numel(), where("all_gather"), ": output ",
           output.str(), " must hold ", size_, " x ", input.numel(), " = ", size_ * input.numel(),
           " elements (one input per rank)");
  // MPI forbids aliased buffers except the in-place form: the input being this rank's slot.
  const bool in_place = input.raw_data() == static_cast<char*>(output.raw_data()) +
                                               static_cast<size_t>(rank_) * input.nbytes();
  DP_CHECK(in_place || !bytes_overlap(input, output), where("all_gather"), ": input and "
           "output overlap; the input may alias only this rank's slot of the output");
  return submit({CollectiveOp::AllGather, CollectiveReduce::None, input.dtype(), input.numel(), -1, tag},
                input, output);
}

WorkPtr MpiProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output, CollectiveReduce op,
                                        int64_t tag) {
  check_tensor("reduce_scatter", "input", input);
  check_tensor("reduce_scatter", "output", output);
  const char* why = nullptr;
  DP_CHECK(op != CollectiveReduce::None, where("reduce_scatter"), ": choose CollectiveReduce::Sum or CollectiveReduce::Average");
  DP_CHECK(input.dtype() == output.dtype(), where("reduce_scatter"), ": input ", input.str(),
           " and output ", output.str(), " differ in dtype");
  DP_CHECK(mpi_reduction_supported(input.dtype(), op, &why), where("reduce_scatter"), ": ",
           collective_reduce_name(op), " of ", input.str(), ": ", why);
  DP_CHECK(input.numel() == size_ * output.numel(), where("reduce_scatter"), ": input ",
           input.str(), " must hold ", size_, " x ", output.numel(), " = ", size_ * output.numel(),
           " elements (one output-sized chunk per rank)");
  DP_CHECK(!bytes_overlap(input, output), where("reduce_scatter"), ": input and output overlap");
  return submit({CollectiveOp::ReduceScatter, op, input.dtype(), input.numel(), -1, tag}, input, output);
}

WorkPtr MpiProcessGroup::barrier(int64_t tag) {
  return submit({CollectiveOp::Barrier, CollectiveReduce::None, kUInt8, 0, -1, tag}, Tensor(), Tensor());
}

// ---- Communication thread -------------------------------------------------------------------

void MpiProcessGroup::run_communication_thread(std::promise<void>& setup_done) {
  pthread_setname_np(pthread_self(), "dp-mpi-comm");  // visible in top/gdb; failure is harmless
  try {
    check_mpi(MPI_Comm_dup(mpi_.world_comm(), &comm_), "MPI_Comm_dup", "MpiProcessGroup: creating the group's communicator");
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "MpiProcessGroup");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", "MpiProcessGroup");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", "MpiProcessGroup");
    // The watchdog calls MPI from its own thread, which needs MPI_THREAD_MULTIPLE; with less it
    // gets no communicator and only aborts (NOTE [ MPI watchdog ]).
    if (options_.watchdog_timeout.count() > 0 && mpi_.thread_level() >= MPI_THREAD_MULTIPLE) {
      check_mpi(MPI_Comm_dup(comm_, &watchdog_comm_), "MPI_Comm_dup",
                "MpiProcessGroup: creating the watchdog's communicator");
      check_mpi(MPI_Comm_set_errhandler(watchdog_comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler",
                "MpiProcessGroup: the watchdog's communicator");
    }
    reduce_ops_.emplace();
  } catch (...) {
    // Best effort: already failing.
    if (watchdog_comm_ != MPI_COMM_NULL) MPI_Comm_free(&watchdog_comm_);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    setup_done.set_exception(std::current_exception());
    return;
  }
  setup_done.set_value();

  for (;;) {
    QueuedCollective item;
    {
      std::unique_lock lock(queue_mutex_);
      queue_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and everything submitted has run
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    run_collective(item);
  }

  reduce_ops_.reset();
  if (int rc = MPI_Comm_free(&comm_); rc != MPI_SUCCESS) {
    std::fprintf(stderr, "dptrain: rank %d: MPI_Comm_free of a process group failed: %s\n", rank_,
                 mpi_error_text(rc).c_str());
  }
}

std::string MpiProcessGroup::context(uint64_t sequence, const CollectiveFingerprint& fingerprint) const {
  return detail::concat("MPI process group, rank ", rank_, " of ", size_, ", collective #", sequence,
                        " ", fingerprint.str());
}

void MpiProcessGroup::run_collective(QueuedCollective& item) {
  const uint64_t sequence = item.work->sequence();
  const CollectiveFingerprint& fingerprint = item.work->fingerprint();
  log_.set_state(sequence, CollectiveState::Running);
  if (watchdog_) watchdog_->started(sequence, fingerprint);
  std::string error;
  if (!first_failure_.empty()) {
    error = detail::concat(context(sequence, fingerprint), ": not run, the group is broken by an "
                           "earlier failure: ", first_failure_);
  } else {
    try {
      // On this thread's timeline in Nsight Systems (NOTE [ NVTX ranges ]).
      const nvtx::ScopedRange range(detail::concat(fingerprint.str(), " #", sequence));
      if (options_.check_agreement) check_ranks_agree(sequence, fingerprint);
      execute(fingerprint, item.input, item.output);
    } catch (const std::exception& e) {
      error = detail::concat(context(sequence, fingerprint), ": ", e.what());
      first_failure_ = error;
    }
  }
  log_.set_state(sequence, error.empty() ? CollectiveState::Completed : CollectiveState::Failed);
  if (watchdog_) watchdog_->finished(sequence);
  item.input = Tensor();
  item.output = Tensor();
  item.work->finish(std::move(error));
}

void MpiProcessGroup::check_ranks_agree(uint64_t sequence, const CollectiveFingerprint& fingerprint) {
  // max(d) == d and max(~d) == ~d on a rank iff every rank's d equals its own, and when they
  // differ every rank sees it, so all of them take the error path together.
  const uint64_t digest = collective_digest(sequence, fingerprint);
  uint64_t maxima[2] = {digest, ~digest};
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, maxima, 2, MPI_UINT64_T, MPI_MAX, comm_), "MPI_Allreduce",
            "checking that all ranks issue this collective");
  if (maxima[0] == digest && maxima[1] == ~digest) return;

  const WireFingerprint mine = WireFingerprint::from(sequence, fingerprint);
  std::vector<WireFingerprint> all(static_cast<size_t>(size_));
  check_mpi(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm_),
            "MPI_Allgather", "gathering every rank's collective after they disagreed");
  std::string message = "ranks disagree on the next collective (every rank must issue the same "
                        "collectives in the same order); each rank's:";
  for (int r = 0; r < size_; ++r) {
    const WireFingerprint& w = all[static_cast<size_t>(r)];
    message += detail::concat("\n  rank ", r, ": #", w.sequence, " ", w.fingerprint().str(),
                              r == rank_ ? "  <- this rank" : "");
  }
  throw Error(message);
}

void MpiProcessGroup::execute(const CollectiveFingerprint& fingerprint, const Tensor& input,
                              const Tensor& output) {
  // Errors propagate to run_collective(), which prefixes the rank and the collective.
  switch (fingerprint.op) {
    case CollectiveOp::AllReduce: {
      const int count = as_mpi_count(fingerprint.count);
      if (options_.rank_ordered_sums && size_ > 1) {
        // Chunk r (the first count % size_ chunks one element longer) is summed by rank r.
        std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
        for (int r = 0, at = 0; r < size_; ++r) {
          counts[static_cast<size_t>(r)] = count / size_ + (r < count % size_ ? 1 : 0);
          displs[static_cast<size_t>(r)] = at;
          at += counts[static_cast<size_t>(r)];
        }
        const size_t item = element_size(fingerprint.dtype);
        char* data = static_cast<char*>(output.raw_data());
        char* mine = data + static_cast<size_t>(displs[static_cast<size_t>(rank_)]) * item;
        rank_ordered_reduce_scatter(data, mine, counts, fingerprint.dtype);
        const MPI_Datatype type = mpi_datatype(fingerprint.dtype);
        check_mpi(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), type, comm_),
                  "MPI_Allgatherv");
      } else {
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, output.raw_data(), count, mpi_datatype(fingerprint.dtype),
                                reduce_ops_->sum_op(fingerprint.dtype), comm_),
                  "MPI_Allreduce");
      }
      if (fingerprint.reduce == CollectiveReduce::Average) {
        divide_in_place(output.raw_data(), fingerprint.count, fingerprint.dtype, size_);
      }
      return;
    }
    case CollectiveOp::Broadcast:
      check_mpi(MPI_Bcast(output.raw_data(), as_mpi_count(fingerprint.count),
                          mpi_datatype(fingerprint.dtype), fingerprint.root, comm_),
                "MPI_Bcast");
      return;
    case CollectiveOp::AllGather: {
      const int count = as_mpi_count(fingerprint.count);
      const MPI_Datatype type = mpi_datatype(fingerprint.dtype);
      const bool in_place = input.raw_data() == static_cast<char*>(output.raw_data()) +
                                                   static_cast<size_t>(rank_) * input.nbytes();
      check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : input.raw_data(), in_place ? 0 : count,
                              in_place ? MPI_DATATYPE_NULL : type, output.raw_data(), count, type, comm_),
                "MPI_Allgather");
      return;
    }
    case CollectiveOp::ReduceScatter: {
      const int64_t chunk = fingerprint.count / size_;
      if (options_.rank_ordered_sums && size_ > 1) {
        rank_ordered_reduce_scatter(input.raw_data(), output.raw_data(),
                                    std::vector<int>(static_cast<size_t>(size_), as_mpi_count(chunk)),
                                    fingerprint.dtype);
      } else {
        check_mpi(MPI_Reduce_scatter_block(input.raw_data(), output.raw_data(), as_mpi_count(chunk),
                                           mpi_datatype(fingerprint.dtype),
                                           reduce_ops_->sum_op(fingerprint.dtype), comm_),
                  "MPI_Reduce_scatter_block");
      }
      if (fingerprint.reduce == CollectiveReduce::Average) {
        divide_in_place(output.raw_data(), chunk, fingerprint.dtype, size_);
      }
      return;
    }
    case CollectiveOp::Barrier:
      check_mpi(MPI_Barrier(comm_), "MPI_Barrier");
      return;
    case CollectiveOp::GraphReplay:  // only NCCL groups capture collectives into graphs
      break;
  }
  DP_ASSERT(false);
}

void MpiProcessGroup::rank_ordered_reduce_scatter(const void* in, void* out, const std::vector<int>& counts,
                                                  DType dtype) {
  const size_t item = element_size(dtype);
  const int mine = counts[static_cast<size_t>(rank_)];
  // Send chunk r to rank r; receive this rank's chunk from every rank, in rank order.
  std::vector<int> send_displs(static_cast<size_t>(size_)), recv_counts(static_cast<size_t>(size_), mine),
      recv_displs(static_cast<size_t>(size_));
  for (int r = 0, at = 0; r < size_; ++r) {
    send_displs[static_cast<size_t>(r)] = at;
    at += counts[static_cast<size_t>(r)];
    recv_displs[static_cast<size_t>(r)] = r * mine;
  }
  chunks_.resize(static_cast<size_t>(size_) * static_cast<size_t>(mine) * item);
  const MPI_Datatype type = mpi_datatype(dtype);
  check_mpi(MPI_Alltoallv(in, counts.data(), send_displs.data(), type, chunks_.data(), recv_counts.data(),
                          recv_displs.data(), type, comm_),
            "MPI_Alltoallv");
  // out = x0; out = x_r + out for r = 1, 2, ...: IEEE addition commutes, so this is ((x0 + x1) + x2) + ...
  const size_t bytes = static_cast<size_t>(mine) * item;
  if (bytes > 0) std::memcpy(out, chunks_.data(), bytes);
  for (int r = 1; r < size_; ++r)
    check_mpi(MPI_Reduce_local(chunks_.data() + static_cast<size_t>(r) * bytes, out, mine, type,
                               reduce_ops_->sum_op(dtype)),
              "MPI_Reduce_local");
}

}  // namespace dp
