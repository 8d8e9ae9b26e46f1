// BlockArena: best fit, splitting, merging with free neighbours, segment growth (host memory
// stands in for the device segments a CUDA graph's capture uses).
#include "runtime/backend/block_arena.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/core/error.h"

namespace dp {
namespace {

// Segments from aligned host memory, recorded so that a test can see how the arena grew.
struct HostSegments {
  std::vector<std::unique_ptr<void, decltype(&std::free)>> owned;
  std::vector<size_t> sizes;

  BlockArena::Grow grow() {
    return [this](size_t n) {
      owned.emplace_back(std::aligned_alloc(BlockArena::kAlignment, n), &std::free);
      sizes.push_back(n);
      return owned.back().get();
    };
  }
};

char* at(void* p) { return static_cast<char*>(p); }

TEST(BlockArena, SmallBlocksShareOneSegmentAndAreAligned) {
  HostSegments segments;
  BlockArena arena(segments.grow());
  void* a = arena.allocate(1);
  void* b = arena.allocate(1000);
  void* c = arena.allocate(513);
  EXPECT_EQ(segments.sizes, std::vector<size_t>{BlockArena::kSmallSegmentBytes});
  EXPECT_EQ(at(b) - at(a), 512);  // 1 rounds up to 512
  EXPECT_EQ(at(c) - at(b), 1024);
  EXPECT_EQ(arena.used_bytes(), 512u + 1024u + 1024u);
  EXPECT_EQ(arena.live_blocks(), 3u);
  EXPECT_EQ(arena.allocate(0), nullptr);
}

TEST(BlockArena, AFreedBlockIsReusedByBestFit) {
  HostSegments segments;
  BlockArena arena(segments.grow());
  void* big = arena.allocate(8192);
  void* keep1 = arena.allocate(512);
  void* small = arena.allocate(1024);
  void* keep2 = arena.allocate(512);
  arena.free(big);
  arena.free(small);
  // 1024 fits both holes; the smaller one (exactly 1024) is chosen.
  EXPECT_EQ(arena.allocate(1000), small);
  // 4096 only fits the big hole, split: its start is handed out, the rest stays free.
  EXPECT_EQ(arena.allocate(4096), big);
  EXPECT_EQ(arena.allocate(4096), at(big) + 4096);
  EXPECT_TRUE(arena.owns(keep1));
  EXPECT_TRUE(arena.owns(keep2));
  EXPECT_EQ(segments.sizes.size(), 1u);
}

TEST(BlockArena, FreedNeighboursMergeSoALargerBlockFits) {
  HostSegments segments;
  BlockArena arena(segments.grow());
  void* a = arena.allocate(4096);
  void* b = arena.allocate(4096);
  void* c = arena.allocate(4096);
  void* fence = arena.allocate(512);
  arena.free(a);
  arena.free(c);
  arena.free(b);  // merges with a before it and c after it
  EXPECT_EQ(arena.allocate(3 * 4096), a);
  EXPECT_TRUE(arena.owns(fence));
  EXPECT_EQ(segments.sizes.size(), 1u);
}

TEST(BlockArena, LargeRequestsGetTheirOwnSegmentAndNeverMergeAcrossSegments) {
  HostSegments segments;
  BlockArena arena(segments.grow());
  const size_t big = BlockArena::kSmallSegmentBytes + 1;
  void* a = arena.allocate(big);
  EXPECT_EQ(segments.sizes, std::vector<size_t>{2 * BlockArena::kSmallSegmentBytes});
  void* b = arena.allocate(2 * BlockArena::kSmallSegmentBytes);  // does not fit a's remainder: a new segment
  EXPECT_EQ(segments.sizes.size(), 2u);
  arena.free(a);
  arena.free(b);
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.reserved_bytes(), 4 * BlockArena::kSmallSegmentBytes);
  // Two free segments side by side in the address space must still not merge: nothing fits
  // three small segments' worth, so a third segment is taken.
  arena.allocate(3 * BlockArena::kSmallSegmentBytes);
  EXPECT_EQ(segments.sizes.size(), 3u);
}

TEST(BlockArena, ARepeatedStepPatternTakesNoNewSegments) {
  // What a captured step looks like: activations allocated, some freed in between, all freed by
  // the end; the second time round nothing new is needed.
  HostSegments segments;
  BlockArena arena(segments.grow());
  auto step = [&] {
    std::vector<void*> live;
    for (size_t k = 1; k <= 40; ++k) {
      live.push_back(arena.allocate(k * 70000));
      if (k % 3 == 0) {
        arena.free(live.front());
        live.erase(live.begin());
      }
    }
    for (void* p : live) arena.free(p);
  };
  step();
  const size_t reserved = arena.reserved_bytes();
  step();
  EXPECT_EQ(arena.reserved_bytes(), reserved);
  EXPECT_EQ(arena.live_blocks(), 0u);
  EXPECT_EQ(arena.release().size(), segments.sizes.size());
  EXPECT_EQ(arena.reserved_bytes(), 0u);
}

TEST(BlockArena, ForeignOrDoubleFreesAndEarlyReleaseAreErrors) {
  HostSegments segments;
  BlockArena arena(segments.grow());
  void* a = arena.allocate(100);
  int local = 0;
  EXPECT_FALSE(arena.owns(&local));
  EXPECT_THROW(arena.free(&local), Error);
  EXPECT_THROW(arena.release(), Error);  // a is live
  arena.free(a);
  EXPECT_FALSE(arena.owns(a));
  EXPECT_THROW(arena.free(a), Error);
  EXPECT_NO_THROW(arena.release());
}

}  // namespace
}  // namespace dp
