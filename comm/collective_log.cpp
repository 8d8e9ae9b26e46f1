#include "comm/collective_log.h"

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp {

const char* collective_op_name(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::AllReduce: return "all_reduce";
    case CollectiveOp::Broadcast: return "broadcast";
    case CollectiveOp::AllGather: return "all_gather";
    case CollectiveOp::ReduceScatter: return "reduce_scatter";
    case CollectiveOp::Barrier: return "barrier";
    case CollectiveOp::GraphReplay: return "graph_replay";
  }
  return "unknown collective";
}

const char* collective_reduce_name(CollectiveReduce op) {
  switch (op) {
    case CollectiveReduce::None: return "none";
    case CollectiveReduce::Sum: return "sum";
    case CollectiveReduce::Average: return "average";
  }
  return "unknown reduction";
}

const char* collective_state_name(CollectiveState state) {
  switch (state) {
    case CollectiveState::Queued: return "queued";
    case CollectiveState::Running: return "running";
    case CollectiveState::Completed: return "completed";
    case CollectiveState::Failed: return "failed";
    case CollectiveState::Captured: return "captured";
  }
  return "unknown state";
}

std::string CollectiveFingerprint::str() const {
  std::string s = std::string(collective_op_name(op)) + "(";
  if (op == CollectiveOp::GraphReplay) {
    s += std::to_string(count) + (count == 1 ? " collective" : " collectives");
  } else if (op != CollectiveOp::Barrier) {
    if (reduce != CollectiveReduce::None) s += std::string(collective_reduce_name(reduce)) + ", ";
    s += std::string(dtype_name(dtype)) + " x " + std::to_string(count);
    if (op == CollectiveOp::Broadcast) s += ", root " + std::to_string(root);
  }
  if (tag != -1) s += std::string(op == CollectiveOp::Barrier ? "" : ", ") + "tag " + std::to_string(tag);
  return s + ")";
}

uint64_t collective_digest(uint64_t sequence, const CollectiveFingerprint& fp) {
  // One 64-bit word per field: struct padding is not hashed.
  Fnv1a h;
  auto mix = [&h](uint64_t word) { h.word(word); };
  mix(sequence);
  mix(static_cast<uint64_t>(fp.op));
  mix(static_cast<uint64_t>(fp.reduce));
  mix(static_cast<uint64_t>(fp.dtype));
  mix(static_cast<uint64_t>(fp.count));
  mix(static_cast<uint64_t>(static_cast<int64_t>(fp.root)));
  mix(static_cast<uint64_t>(fp.tag));
  return h.value();
}

CollectiveLog::CollectiveLog(size_t capacity) : capacity_(capacity) {
  DP_CHECK(capacity > 0, "CollectiveLog: capacity must be positive");
}

uint64_t CollectiveLog::append(const CollectiveFingerprint& fingerprint) {
  std::lock_guard lock(mutex_);
  if (records_.size() == capacity_) records_.pop_front();
  records_.push_back({next_sequence_, fingerprint, CollectiveState::Queued});
  return next_sequence_++;
}

void CollectiveLog::set_state(uint64_t sequence, CollectiveState state) {
  std::lock_guard lock(mutex_);
  if (records_.empty() || sequence < records_.front().sequence || sequence >= next_sequence_) return;
  records_[sequence - records_.front().sequence].state = state;
}

uint64_t CollectiveLog::next_sequence() const {
  std::lock_guard lock(mutex_);
  return next_sequence_;
}

std::optional<CollectiveRecord> CollectiveLog::find(uint64_t sequence) const {
  std::lock_guard lock(mutex_);
  if (records_.empty() || sequence < records_.front().sequence || sequence >= next_sequence_) {
    return std::nullopt;
  }
  return records_[sequence - records_.front().sequence];
}

std::vector<CollectiveRecord> CollectiveLog::recent() const {
  std::lock_guard lock(mutex_);
  return {records_.begin(), records_.end()};
}

}  // namespace dp
