// A best-fit sub-allocator over big segments of device memory, for the memory a CUDA graph's
// capture allocates (NOTE [ Graph memory ] in runtime/backend/cuda/cuda_backend.h). The
// arena's bookkeeping is host-only and device-agnostic: it asks `grow` for a new segment when no
// free block fits, and never gives segments back by itself (release() hands them to the owner).
//
// Blocks are 512-byte aligned within a segment (16-byte vector loads stay aligned, as with
// cudaMalloc's 256), split when a free block is larger than asked for, and merged with free
// neighbours of the same segment when freed, so a step's pattern of allocations fits in about its
// peak of live bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace dp {

class BlockArena {
 public:
  // Returns the base of a new segment of exactly `nbytes` (a multiple of 512); throws on failure.
  using Grow = std::function<void*(size_t nbytes)>;

  static constexpr size_t kAlignment = 512;
  // Requests up to this size share segments of this size; larger ones get a segment of their own
  // (rounded up to a multiple of it), as CUDA's own allocators do.
  static constexpr size_t kSmallSegmentBytes = size_t(2) << 20;

  explicit BlockArena(Grow grow) : grow_(std::move(grow)) {}
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // A block of at least `nbytes` (nullptr for 0).
  void* allocate(size_t nbytes);
  // True when `ptr` is a block this arena handed out and has not taken back.
  bool owns(const void* ptr) const;
  // Takes back a block handed out by allocate(); throws dp::Error for any other pointer.
  void free(void* ptr);

  size_t used_bytes() const { return used_bytes_; }          // in blocks handed out (rounded sizes)
  size_t reserved_bytes() const { return reserved_bytes_; }  // in segments
  size_t live_blocks() const { return live_blocks_; }
  size_t segment_count() const { return segments_.size(); }
  // Forgets every block and returns the segments' bases, for the owner to free; only when no block
  // is live (throws dp::Error otherwise).
  std::vector<void*> release();

 private:
  struct Block {
    size_t size = 0;
    uintptr_t segment = 0;
    bool free = true;
  };
  // Marks [addr, addr + size) free in segment `segment` and indexes it.
  void add_free(uintptr_t addr, size_t size, uintptr_t segment);
  void remove_free(uintptr_t addr);

  Grow grow_;
  std::map<uintptr_t, size_t> segments_;  // base → size
  std::map<uintptr_t, Block> blocks_;     // every block of every segment, by address
  std::set<std::pair<size_t, uintptr_t>> free_by_size_;  // best fit: smallest size, then lowest address
  size_t used_bytes_ = 0, reserved_bytes_ = 0, live_blocks_ = 0;
};

}  // namespace dp
