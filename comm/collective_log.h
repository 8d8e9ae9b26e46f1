// What a collective is (its fingerprint), and each group's log of the collectives it submitted,
// sequence-numbered, so that ranks can compare their logs (see NOTE [ Process group contract ]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"

namespace dp {

// GraphReplay is not a collective of its own: it is one replay of a CUDA graph holding `count`
// collectives captured earlier (NOTE [ Collectives in CUDA graphs ] in comm/nccl/nccl_process_group.h).
enum class CollectiveOp : uint8_t { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier, GraphReplay };
enum class CollectiveReduce : uint8_t { None, Sum, Average };  // None: the op does not reduce

const char* collective_op_name(CollectiveOp op);  // "all_reduce", ...
const char* collective_reduce_name(CollectiveReduce op);          // "sum", "average", "none"

// Everything every rank must agree on for one collective.
struct CollectiveFingerprint {
  CollectiveOp op = CollectiveOp::Barrier;
  CollectiveReduce reduce = CollectiveReduce::None;
  DType dtype = kFloat32;  // kUInt8 with count 0 for a barrier
  int64_t count = 0;       // elements of the input this rank contributes (all of it for reduce_scatter);
                           // for a graph replay, the collectives the graph holds
  int root = -1;           // broadcast only
  int64_t tag = -1;        // the caller's (a bucket index); -1 for none

  friend bool operator==(const CollectiveFingerprint&, const CollectiveFingerprint&) = default;
  // "all_reduce(sum, float32 x 1024, tag 3)"
  std::string str() const;
};

// A 64-bit digest of (sequence, fingerprint): equal on two ranks iff they agree on that
// collective (up to hash collisions), so agreement can be checked by exchanging one number.
uint64_t collective_digest(uint64_t sequence, const CollectiveFingerprint& fingerprint);

// Captured: recorded into a CUDA graph, not run; its replays are logged as graph_replay entries.
enum class CollectiveState : uint8_t { Queued, Running, Completed, Failed, Captured };
const char* collective_state_name(CollectiveState state);

struct CollectiveRecord {
  uint64_t sequence = 0;
  CollectiveFingerprint fingerprint;
  CollectiveState state = CollectiveState::Queued;
};

// The most recent `capacity` collectives of one group, in sequence order. Thread-safe: the
// submitting thread appends, the backend's communication thread updates states.
class CollectiveLog {
 public:
  static constexpr size_t kDefaultCapacity = 256;
  explicit CollectiveLog(size_t capacity = kDefaultCapacity);

  // Appends with the next sequence number (0 for the first) and returns that number.
  uint64_t append(const CollectiveFingerprint& fingerprint);
  // Updates the state of a collective still in the log; older ones are silently gone.
  void set_state(uint64_t sequence, CollectiveState state);

  uint64_t next_sequence() const;
  // The record of `sequence`, if it is still in the log.
  std::optional<CollectiveRecord> find(uint64_t sequence) const;
  // Oldest first.
  std::vector<CollectiveRecord> recent() const;
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::deque<CollectiveRecord> records_;  // consecutive sequence numbers
  uint64_t next_sequence_ = 0;
};

}  // namespace dp
