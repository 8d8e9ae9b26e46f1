// Sample orders: sequential, seeded shuffles (deterministic, new each epoch), PyTorch-style
// distributed shards, and fixed-size batching.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "runtime/core/error.h"
#include "runtime/data/sampler.h"

namespace dp {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Sampler, SequentialIsIdentityEveryEpoch) {
  const SequentialSampler sampler(5);
  EXPECT_EQ(sampler.size(), 5);
  EXPECT_EQ(sampler.indices(0), iota(5));
  EXPECT_EQ(sampler.indices(3), iota(5));
  EXPECT_THROW(SequentialSampler(-1), Error);
}

TEST(Sampler, PermutationIsDeterministicAndChangesPerEpoch) {
  const std::vector<int64_t> a = epoch_permutation(1000, 42, 0);
  EXPECT_EQ(sorted(a), iota(1000));
  EXPECT_EQ(epoch_permutation(1000, 42, 0), a);
  EXPECT_NE(epoch_permutation(1000, 42, 1), a);
  EXPECT_NE(epoch_permutation(1000, 43, 0), a);
  EXPECT_NE(a, iota(1000));
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), (std::vector<int64_t>{0}));
}

// Pinned values: resumed runs and other platforms must see exactly these orders
// (NOTE [ Deterministic epochs ]); change them only on purpose.
TEST(Sampler, PermutationIsPinned) {
  EXPECT_EQ(epoch_permutation(10, 0, 0), (std::vector<int64_t>{5, 2, 9, 6, 1, 8, 7, 3, 0, 4}));
  EXPECT_EQ(epoch_permutation(10, 1234, 7), (std::vector<int64_t>{8, 6, 3, 4, 9, 1, 5, 2, 0, 7}));
}

TEST(Sampler, PermutationIsRoughlyUniform) {
  // Position of element 0 over many epochs: each of 8 positions about 1/8 of the time.
  std::vector<int> hits(8, 0);
  const int epochs = 8000;
  for (int e = 0; e < epochs; ++e) {
    const std::vector<int64_t> p = epoch_permutation(8, 9, e);
    ++hits[std::find(p.begin(), p.end(), 0) - p.begin()];
  }
  for (int h : hits) EXPECT_NEAR(h, epochs / 8, 150);
}

TEST(Sampler, RandomSamplerUsesSeedAndEpoch) {
  const RandomSampler sampler(50, 7);
  EXPECT_EQ(sampler.size(), 50);
  EXPECT_EQ(sampler.indices(2), epoch_permutation(50, 7, 2));
  EXPECT_NE(sampler.indices(2), sampler.indices(3));
}

TEST(DistributedSampler, MatchesPyTorchWithoutShuffle) {
  // torch.utils.data.DistributedSampler(range(10), num_replicas=3, shuffle=False)
  const std::vector<std::vector<int64_t>> expected{{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  const std::vector<std::vector<int64_t>> expected_drop_last{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (int rank = 0; rank < 3; ++rank) {
    const DistributedSampler padded(10, {.rank = rank, .world_size = 3, .shuffle = false});
    EXPECT_EQ(padded.size(), 4);
    EXPECT_EQ(padded.indices(0), expected[rank]);
    const DistributedSampler dropped(10, {.rank = rank, .world_size = 3, .shuffle = false, .drop_last = true});
    EXPECT_EQ(dropped.size(), 3);
    EXPECT_EQ(dropped.indices(0), expected_drop_last[rank]);
  }
}

// Over all ranks: shards equally long, pairwise disjoint apart from the padding, and together
// covering the epoch's permutation.
void check_shards(int64_t n, int world, bool drop_last) {
  SCOPED_TRACE(::testing::Message() << "n=" << n << " world=" << world << " drop_last=" << drop_last);
  for (int64_t epoch : {0, 1}) {
    std::vector<int64_t> all;
    std::vector<std::vector<int64_t>> shards;
    for (int rank = 0; rank < world; ++rank) {
      const DistributedSampler sampler(n, {.rank = rank, .world_size = world, .seed = 5, .drop_last = drop_last});
      shards.push_back(sampler.indices(epoch));
      ASSERT_EQ(static_cast<int64_t>(shards.back().size()), sampler.size());
      ASSERT_EQ(sampler.size(), static_cast<int64_t>(shards.front().size()));
      all.insert(all.end(), shards.back().begin(), shards.back().end());
    }
    const std::set<int64_t> distinct(all.begin(), all.end());
    if (drop_last) {
      EXPECT_EQ(distinct.size(), all.size()) << "disjoint";
      EXPECT_EQ(static_cast<int64_t>(all.size()), n / world * world);
    } else {
      EXPECT_EQ(static_cast<int64_t>(distinct.size()), n) << "complete coverage";
      EXPECT_EQ(static_cast<int64_t>(all.size()), (n + world - 1) / world * world);
    }
    // Interleaving the shards gives back the (padded or cut) epoch permutation of every rank.
    const std::vector<int64_t> perm = epoch_permutation(n, 5, epoch);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(shards[i % world][i / world], perm[i % perm.size()]) << i;
    }
  }
}

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheData) {
  check_shards(60000, 4, false);
  check_shards(10, 3, false);
  check_shards(10, 3, true);
  check_shards(11, 4, true);
  check_shards(2, 4, false);  // fewer samples than ranks: padding repeats them
}

TEST(DistributedSampler, ShuffleChangesPerEpochAndValidates) {
  const DistributedSampler sampler(100, {.rank = 1, .world_size = 2, .seed = 3});
  EXPECT_NE(sampler.indices(0), sampler.indices(1));
  EXPECT_EQ(sampler.indices(1), sampler.indices(1));
  EXPECT_THROW(DistributedSampler(10, {.rank = 2, .world_size = 2}), Error);
  EXPECT_THROW(DistributedSampler(10, {.rank = 0, .world_size = 0}), Error);
  EXPECT_THROW(DistributedSampler(10, {.rank = -1, .world_size = 2}), Error);
}

TEST(FixedSizeBatchSampler, CutsOrderIntoBatches) {
  const FixedSizeBatchSampler keep(std::make_unique<SequentialSampler>(10), 4, false);
  EXPECT_EQ(keep.num_batches(0), 3);
  EXPECT_EQ(keep.max_batch_size(), 4);
  const EpochPlan plan = keep.plan(0);
  ASSERT_EQ(plan.num_batches(), 3);
  EXPECT_EQ(std::vector<int64_t>(plan.batch(2).begin(), plan.batch(2).end()), (std::vector<int64_t>{8, 9}));
  EXPECT_THROW(plan.batch(3), Error);

  const FixedSizeBatchSampler drop(std::make_unique<RandomSampler>(10, 1), 4, true);
  const EpochPlan dropped = drop.plan(5);
  EXPECT_EQ(dropped.num_batches(), 2);
  EXPECT_EQ(dropped.indices.size(), 8u);
  const std::vector<int64_t> perm = epoch_permutation(10, 1, 5);
  EXPECT_EQ(dropped.indices, std::vector<int64_t>(perm.begin(), perm.begin() + 8));

  EXPECT_EQ(FixedSizeBatchSampler(std::make_unique<SequentialSampler>(0), 4, false).plan(0).num_batches(), 0);
  EXPECT_THROW(FixedSizeBatchSampler(std::make_unique<SequentialSampler>(3), 0, false), Error);
}

// A batch larger than the epoch holds at most the epoch's samples (the loader sizes its buffers by
// max_batch_size), and counting batches cannot overflow for any batch size.
TEST(FixedSizeBatchSampler, BatchesLargerThanTheDataAreBoundedAndCountedWithoutOverflow) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  const FixedSizeBatchSampler keep(std::make_unique<SequentialSampler>(10), huge, false);
  EXPECT_EQ(keep.max_batch_size(), 10);
  EXPECT_EQ(keep.num_batches(0), 1);
  ASSERT_EQ(keep.plan(0).num_batches(), 1);
  EXPECT_EQ(keep.plan(0).batch(0).size(), 10u);
  const FixedSizeBatchSampler drop(std::make_unique<SequentialSampler>(10), huge - 1, true);
  EXPECT_EQ(drop.num_batches(0), 0);
  EXPECT_EQ(FixedSizeBatchSampler(std::make_unique<SequentialSampler>(0), 4, false).max_batch_size(), 1);
  EXPECT_EQ(FixedSizeBatchSampler(std::make_unique<SequentialSampler>(10), 10, true).num_batches(0), 1);
}

// The batch of shard s at step b on an S-rank run, as DistributedSampler + FixedSizeBatchSampler.
std::vector<int64_t> shard_batch_on_s_ranks(int64_t n, int64_t shards, int64_t s, int64_t per_shard, bool drop_last,
                                            int64_t epoch, int64_t b) {
  const FixedSizeBatchSampler rank_batches(
      std::make_unique<DistributedSampler>(
          n, DistributedSamplerOptions{.rank = static_cast<int>(s), .world_size = static_cast<int>(shards),
                                       .shuffle = true, .seed = 7, .drop_last = drop_last}),
      per_shard, drop_last);
  const EpochPlan plan = rank_batches.plan(epoch);
  return std::vector<int64_t>(plan.batch(b).begin(), plan.batch(b).end());
}

// NOTE [ Fixed shards ]: whatever process owns a shard, its micro-batch is the batch that
// shard's own rank would draw on a world of S ranks; a process's batch is its shards' in order.
TEST(ShardedBatchSampler, EachMicroBatchIsWhatItsShardsRankWouldDraw) {
  for (const bool drop_last : {false, true}) {
    const int64_t n = 103, shards = 4, per_shard = 6;  // 26 (or 25) samples per shard: a partial last batch
    for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {0, 2}, {2, 2}, {3, 1}}) {
      const ShardedBatchSampler sampler(n, {.shards = shards, .first_shard = first, .shard_count = count,
                                            .shard_batch = per_shard, .shuffle = true, .seed = 7,
                                            .drop_last = drop_last});
      EXPECT_EQ(sampler.max_batch_size(), count * per_shard);
      const EpochPlan plan = sampler.plan(2);
      ASSERT_EQ(plan.num_batches(), sampler.num_batches(2));
      EXPECT_EQ(plan.num_batches(), drop_last ? 4 : 5) << "25 / 26 samples per shard in batches of 6";
      for (int64_t b = 0; b < plan.num_batches(); ++b) {
        const int64_t m = sampler.shard_samples(b);
        EXPECT_EQ(m, !drop_last && b == 4 ? 2 : 6);
        ASSERT_EQ(static_cast<int64_t>(plan.batch(b).size()), count * m);
        for (int64_t k = 0; k < count; ++k) {
          const std::vector<int64_t> micro(plan.batch(b).begin() + k * m, plan.batch(b).begin() + (k + 1) * m);
          EXPECT_EQ(micro, shard_batch_on_s_ranks(n, shards, first + k, per_shard, drop_last, 2, b))
              << "shard " << first + k << " batch " << b;
        }
      }
    }
  }
  EXPECT_THROW(ShardedBatchSampler(10, {.shards = 2, .first_shard = 1, .shard_count = 2}), Error);
  EXPECT_THROW(ShardedBatchSampler(10, {.shards = 2, .shard_count = 1, .shard_batch = 0}), Error);
  EXPECT_THROW(ShardedBatchSampler(10, {.shards = 0}), Error);
}

}  // namespace
}  // namespace dp
