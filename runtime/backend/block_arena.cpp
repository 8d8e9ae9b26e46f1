#include "runtime/backend/block_arena.h"

#include <iterator>

#include "runtime/core/error.h"

namespace dp {

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

void BlockArena::add_free(uintptr_t addr, size_t size, uintptr_t segment) {
  blocks_[addr] = Block{size, segment, true};
  free_by_size_.emplace(size, addr);
}

void BlockArena::remove_free(uintptr_t addr) {
  const auto it = blocks_.find(addr);
  free_by_size_.erase({it->second.size, addr});
  blocks_.erase(it);
}

void* BlockArena::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = round_up(nbytes, kAlignment);
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) {
    const size_t segment_bytes = round_up(size, kSmallSegmentBytes);
    void* base = grow_(segment_bytes);
    DP_CHECK(base != nullptr, "BlockArena: the segment allocator returned no memory for ", segment_bytes, " bytes");
    const auto addr = reinterpret_cast<uintptr_t>(base);
    DP_CHECK(addr % kAlignment == 0, "BlockArena: a segment at ", base, " is not ", kAlignment, "-byte aligned");
    segments_[addr] = segment_bytes;
    reserved_bytes_ += segment_bytes;
    add_free(addr, segment_bytes, addr);
    fit = free_by_size_.find({segment_bytes, addr});
  }
  const uintptr_t addr = fit->second;
  const Block block = blocks_.at(addr);
  remove_free(addr);
  blocks_[addr] = Block{size, block.segment, false};
  if (block.size > size) add_free(addr + size, block.size - size, block.segment);  // the rest stays free
  used_bytes_ += size;
  ++live_blocks_;
  return reinterpret_cast<void*>(addr);
}

bool BlockArena::owns(const void* ptr) const {
  const auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  return it != blocks_.end() && !it->second.free;
}

void BlockArena::free(void* ptr) {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.find(addr);
  DP_CHECK(it != blocks_.end() && !it->second.free, "BlockArena::free: ", ptr, " is not a live block of this arena");
  uintptr_t start = addr;
  size_t size = it->second.size;
  const uintptr_t segment = it->second.segment;
  used_bytes_ -= size;
  --live_blocks_;
  blocks_.erase(it);
  // Merge with the free block after it and the free block before it, within the segment.
  const auto next = blocks_.find(start + size);
  if (next != blocks_.end() && next->second.free && next->second.segment == segment) {
    size += next->second.size;
    remove_free(next->first);
  }
  auto after = blocks_.lower_bound(start);
  if (after != blocks_.begin()) {
    const auto prev = std::prev(after);
    if (prev->second.free && prev->second.segment == segment && prev->first + prev->second.size == start) {
      start = prev->first;
      size += prev->second.size;
      remove_free(start);
    }
  }
  add_free(start, size, segment);
}

std::vector<void*> BlockArena::release() {
  DP_CHECK(live_blocks_ == 0, "BlockArena::release: ", live_blocks_, " block(s) are still in use");
  std::vector<void*> bases;
  for (const auto& [base, size] : segments_) bases.push_back(reinterpret_cast<void*>(base));
  segments_.clear();
  blocks_.clear();
  free_by_size_.clear();
  reserved_bytes_ = 0;
  return bases;
}

}  // namespace dp
