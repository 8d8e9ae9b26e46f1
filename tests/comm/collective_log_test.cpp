// Fingerprints, digests and the per-group collective log (single process, no MPI).
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "comm/collective_log.h"

namespace dp {
namespace {

CollectiveFingerprint bucket_all_reduce(int64_t count, int64_t bucket) {
  return {CollectiveOp::AllReduce, CollectiveReduce::Sum, kFloat32, count, -1, bucket};
}

TEST(CollectiveFingerprint, Str) {
  EXPECT_EQ(bucket_all_reduce(1024, 3).str(), "all_reduce(sum, float32 x 1024, tag 3)");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::Broadcast, CollectiveReduce::None, kInt64, 7, 0, -1}).str(),
            "broadcast(int64 x 7, root 0)");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::ReduceScatter, CollectiveReduce::Average, kBFloat16, 8, -1, -1}).str(),
            "reduce_scatter(average, bfloat16 x 8)");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::Barrier, CollectiveReduce::None, kUInt8, 0, -1, -1}).str(), "barrier()");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::Barrier, CollectiveReduce::None, kUInt8, 0, -1, 9}).str(), "barrier(tag 9)");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::GraphReplay, CollectiveReduce::None, kUInt8, 12, -1, -1}).str(),
            "graph_replay(12 collectives)");
  EXPECT_EQ((CollectiveFingerprint{CollectiveOp::GraphReplay, CollectiveReduce::None, kUInt8, 1, -1, 2}).str(),
            "graph_replay(1 collective, tag 2)");
  EXPECT_STREQ(collective_state_name(CollectiveState::Captured), "captured");
}

TEST(CollectiveDigest, ChangesWithEveryField) {
  const CollectiveFingerprint base = bucket_all_reduce(1024, 3);
  const uint64_t d = collective_digest(5, base);
  EXPECT_EQ(d, collective_digest(5, bucket_all_reduce(1024, 3)));
  EXPECT_NE(d, collective_digest(6, base));
  std::vector<CollectiveFingerprint> variants(6, base);
  variants[0].op = CollectiveOp::ReduceScatter;
  variants[1].reduce = CollectiveReduce::Average;
  variants[2].dtype = kFloat16;
  variants[3].count = 1025;
  variants[4].root = 0;
  variants[5].tag = 4;
  for (const CollectiveFingerprint& v : variants) EXPECT_NE(d, collective_digest(5, v)) << v.str();
}

TEST(CollectiveLog, NumbersFromZeroAndTracksStates) {
  CollectiveLog log;
  EXPECT_EQ(log.append(bucket_all_reduce(10, 0)), 0u);
  EXPECT_EQ(log.append(bucket_all_reduce(20, 1)), 1u);
  EXPECT_EQ(log.next_sequence(), 2u);
  log.set_state(0, CollectiveState::Completed);
  log.set_state(1, CollectiveState::Failed);
  std::vector<CollectiveRecord> records = log.recent();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].sequence, 0u);
  EXPECT_EQ(records[0].state, CollectiveState::Completed);
  EXPECT_EQ(records[1].fingerprint, bucket_all_reduce(20, 1));
  EXPECT_EQ(records[1].state, CollectiveState::Failed);
  EXPECT_FALSE(log.find(2).has_value());
}

TEST(CollectiveLog, KeepsOnlyTheMostRecent) {
  CollectiveLog log(3);
  for (int64_t i = 0; i < 5; ++i) log.append(bucket_all_reduce(i, i));
  std::vector<CollectiveRecord> records = log.recent();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records.front().sequence, 2u);
  EXPECT_EQ(records.back().sequence, 4u);
  EXPECT_FALSE(log.find(1).has_value());
  ASSERT_TRUE(log.find(3).has_value());
  EXPECT_EQ(log.find(3)->fingerprint.tag, 3);
  log.set_state(0, CollectiveState::Completed);  // gone from the log: ignored
  log.set_state(4, CollectiveState::Running);
  EXPECT_EQ(log.find(4)->state, CollectiveState::Running);
  EXPECT_EQ(log.find(2)->state, CollectiveState::Queued);
}

TEST(CollectiveLog, ConcurrentAppendsGetDistinctConsecutiveNumbers) {
  CollectiveLog log(10000);
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) got[t].push_back(log.append(bucket_all_reduce(i, t)));
    });
  }
  for (std::thread& th : threads) th.join();
  std::set<uint64_t> all;
  for (const auto& g : got) all.insert(g.begin(), g.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(*all.rbegin(), static_cast<uint64_t>(kThreads * kPerThread - 1));
  // The record of each number is the fingerprint its thread appended.
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) EXPECT_EQ(log.find(got[t][i])->fingerprint, bucket_all_reduce(i, t));
  }
}

}  // namespace
}  // namespace dp
