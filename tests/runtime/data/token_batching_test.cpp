// Token batching (runtime/data/token_batching.h): fixed and max_tokens batching, SortAndDeal rank
// balancing and greedy packing; exact plans on hand-made lengths, measured bounds on a skewed
// (log-normal, clipped to [8, 512]) length distribution, determinism and the error messages.
#include "runtime/data/token_batching.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "runtime/core/error.h"
#include "runtime/data/sampler.h"

namespace dp {
namespace {

using testing::error_of;

// Lengths with BERT-like skew: log-normal around 128 tokens (sigma 0.8), clipped to [8, 512],
// about 4 % at 512. Box-Muller on the raw mt19937_64 output, so the same on every platform.
std::vector<int32_t> skewed_lengths(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
  std::vector<int32_t> lengths;
  for (int64_t i = 0; i < n; ++i) {
    const double normal = std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
    const double length = std::exp(std::log(128.0) + 0.8 * normal);
    lengths.push_back(static_cast<int32_t>(std::clamp<long>(std::lround(length), 8, 512)));
  }
  return lengths;
}

TokenBatchingOptions fixed_options(int64_t batch_size, int world_size) {
  TokenBatchingOptions o;
  o.batching = TokenBatching::Fixed;
  o.batch_size = batch_size;
  o.world_size = world_size;
  return o;
}

TokenBatchingOptions max_tokens_options(int64_t max_tokens, int world_size) {
  TokenBatchingOptions o;
  o.batching = TokenBatching::MaxTokens;
  o.max_tokens = max_tokens;
  o.world_size = world_size;
  return o;
}

// Every rank batch's sequences, step after step, rank after rank, with its row boundaries.
std::vector<std::vector<int64_t>> layout(const TokenEpochPlan& plan) {
  std::vector<std::vector<int64_t>> out;
  for (const TokenStep& step : plan.steps)
    for (const RankBatch& batch : step.ranks) {
      out.push_back(batch.sequences);
      out.push_back(batch.row_starts);
    }
  return out;
}

// How often each sequence is trained in the epoch.
std::vector<int> appearances(const TokenEpochPlan& plan, size_t n) {
  std::vector<int> count(n, 0);
  for (const TokenStep& step : plan.steps)
    for (const RankBatch& batch : step.ranks)
      for (int64_t s : batch.sequences) ++count[static_cast<size_t>(s)];
  return count;
}

TEST(TokenBatching, PaddedRowLengthRoundsUpButNotPastMaxSeqLength) {
  TokenBatchingOptions o;  // pad_to_multiple 8, max_seq_length 512
  EXPECT_EQ(padded_row_length(1, o), 8);
  EXPECT_EQ(padded_row_length(8, o), 8);
  EXPECT_EQ(padded_row_length(9, o), 16);
  EXPECT_EQ(padded_row_length(512, o), 512);
  o.max_seq_length = 510;
  EXPECT_EQ(padded_row_length(505, o), 510);
  EXPECT_EQ(padded_row_length(510, o), 510);
  o.pad_to_multiple = 1;
  EXPECT_EQ(padded_row_length(37, o), 37);
  o.pad_to_multiple = int64_t{1} << 62;  // huge multiples must not overflow
  EXPECT_EQ(padded_row_length(37, o), 510);
  EXPECT_ERROR_CONTAINS(padded_row_length(511, o), "data.max_seq_length 510");
}

// Fixed batching pads each rank to its own longest sequence; every number by hand.
TEST(TokenBatching, FixedWastesThePaddingToEachRanksLongest) {
  const std::vector<int32_t> lengths{10, 20, 30, 40, 50, 60, 70, 80};
  TokenBatchingOptions o = fixed_options(4, 2);
  o.shuffle = false;
  o.balance = RankBalance::None;
  const TokenEpochPlan plan = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(plan.steps.size(), 2u);
  // Step 0: {10, 20} padded to 24 and {30, 40} padded to 40; step 1: {50, 60} -> 64, {70, 80} -> 80.
  const std::vector<std::vector<int64_t>> sequences{{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const std::vector<int64_t> padded_lengths{24, 40, 64, 80}, tokens{30, 70, 110, 150};
  for (size_t s = 0; s < 2; ++s) {
    ASSERT_EQ(plan.steps[s].ranks.size(), 2u);
    for (size_t r = 0; r < 2; ++r) {
      const RankBatch& batch = plan.steps[s].ranks[r];
      EXPECT_EQ(batch.sequences, sequences[2 * s + r]);
      EXPECT_EQ(batch.row_starts, (std::vector<int64_t>{0, 1, 2}));
      EXPECT_EQ(batch.padded_length, padded_lengths[2 * s + r]);
      EXPECT_EQ(batch.tokens, tokens[2 * s + r]);
      EXPECT_EQ(batch.padded_tokens(), 2 * padded_lengths[2 * s + r]);
    }
  }
  // The loss normaliser: real tokens over all ranks.
  EXPECT_EQ(plan.steps[0].tokens, 100);
  EXPECT_EQ(plan.steps[1].tokens, 260);
  EXPECT_EQ(plan.steps[0].sequences, 4);
  EXPECT_EQ(plan.steps[0].padded_tokens, 48 + 80);
  EXPECT_DOUBLE_EQ(plan.steps[0].imbalance(), 80.0 / 64.0);
  EXPECT_DOUBLE_EQ(plan.steps[1].imbalance(), 160.0 / 144.0);
  EXPECT_DOUBLE_EQ(plan.steps[0].padding_waste(), 1.0 - 100.0 / 128.0);

  const TokenEpochStats& stats = plan.stats;
  EXPECT_EQ(stats.steps, 2);
  EXPECT_EQ(stats.rows, 8);
  EXPECT_EQ(stats.sequences, 8);
  EXPECT_EQ(stats.tokens, 360);
  EXPECT_EQ(stats.padded_tokens, 416);
  EXPECT_DOUBLE_EQ(stats.padding_waste, 56.0 / 416.0);
  EXPECT_DOUBLE_EQ(stats.mean_imbalance, (80.0 / 64.0 + 160.0 / 144.0) / 2.0);
  EXPECT_DOUBLE_EQ(stats.worst_imbalance, 1.25);
  EXPECT_EQ(stats.worst_imbalance_step, 0);
  EXPECT_EQ(stats.max_rows, 2);
  EXPECT_EQ(stats.max_padded_tokens, 160);
  EXPECT_EQ(stats.batch_sizes, (std::map<int64_t, int64_t>{{2, 4}}));
  EXPECT_EQ(stats.padded_lengths, (std::map<int64_t, int64_t>{{24, 1}, {40, 1}, {64, 1}, {80, 1}}));
  EXPECT_EQ(stats.dropped_sequences, 0);
  EXPECT_EQ(stats.repeated_sequences, 0);
  EXPECT_EQ(describe(stats),
            "padding waste 13.5 % | rank imbalance mean 1.18 worst 1.25 | 2 steps | batch sizes 2:4 | padded lengths "
            "24:1 40:1 64:1 80:1");
}

// SortAndDeal on one hand-made step: the longest rows first, cut where the largest rank is smallest.
TEST(TokenBatching, SortAndDealCutsTheSortedStepWhereTheLargestRankIsSmallest) {
  const std::vector<int32_t> lengths{80, 10, 70, 20, 60, 30, 50, 40};
  TokenBatchingOptions o = fixed_options(8, 2);
  o.shuffle = false;
  o.balance = RankBalance::None;
  const TokenEpochPlan none = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(none.steps.size(), 1u);
  // {80, 10, 70, 20}: 4 x 80 = 320; {60, 30, 50, 40}: 4 x 64 = 256.
  EXPECT_EQ(none.steps[0].ranks[0].padded_tokens(), 320);
  EXPECT_EQ(none.steps[0].ranks[1].padded_tokens(), 256);
  EXPECT_DOUBLE_EQ(none.stats.padding_waste, 1.0 - 360.0 / 576.0);
  EXPECT_DOUBLE_EQ(none.stats.worst_imbalance, 320.0 / 288.0);

  o.balance = RankBalance::SortAndDeal;
  const TokenEpochPlan dealt = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(dealt.steps.size(), 1u);
  // Sorted 80 70 60 50 40 30 20 10 (padded 80 72 64 56 40 32 24 16). Cuts: after 2 rows
  // max(160, 6 x 64) = 384, after 3 max(240, 5 x 56) = 280, after 4 max(320, 4 x 40) = 320.
  const RankBatch& longest = dealt.steps[0].ranks[0];
  const RankBatch& shortest = dealt.steps[0].ranks[1];
  EXPECT_EQ(longest.sequences, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(longest.padded_tokens(), 240);
  EXPECT_EQ(shortest.sequences, (std::vector<int64_t>{6, 7, 5, 3, 1}));
  EXPECT_EQ(shortest.padded_length, 56);
  EXPECT_EQ(shortest.padded_tokens(), 280);
  EXPECT_EQ(dealt.steps[0].tokens, 360);  // the step's sequences are the same, only dealt differently
  EXPECT_DOUBLE_EQ(dealt.stats.padding_waste, 1.0 - 360.0 / 520.0);
  EXPECT_DOUBLE_EQ(dealt.stats.worst_imbalance, 280.0 / 260.0);
}

// When several cuts reach the smallest bound, the one with less padding wins.
TEST(TokenBatching, SortAndDealKeepsTheCutThatPadsLess) {
  const std::vector<int32_t> lengths{10, 100, 60, 10, 100, 10};
  TokenBatchingOptions o = fixed_options(6, 3);
  o.shuffle = false;
  o.pad_to_multiple = 1;
  const TokenEpochPlan plan = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(plan.steps.size(), 1u);
  // Sorted 100 100 60 10 10 10; no cut beats 200. Filling from the longest gives {100, 100}
  // {60, 10, 10} {10}: 200 + 180 + 10 = 390 padded; from the shortest {100} {100, 60} {10, 10, 10}:
  // 100 + 200 + 30 = 330.
  const std::vector<std::vector<int64_t>> expected{{1}, {4, 2}, {0, 3, 5}};
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(plan.steps[0].ranks[r].sequences, expected[r]);
  EXPECT_EQ(plan.steps[0].padded_tokens, 330);
  EXPECT_EQ(plan.steps[0].max_rank_padded_tokens(), 200);
  o.balance = RankBalance::None;  // {10, 100} {60, 10} {100, 10}: also 200 at most, but 520 padded
  EXPECT_EQ(plan_token_epoch(lengths, o, 0).steps[0].padded_tokens, 520);
}

// With shuffling, the fixed batches follow the sampler's permutation (pinned in sampler_test).
TEST(TokenBatching, FixedFollowsTheSamplersEpochPermutation) {
  std::vector<int32_t> lengths(10, 16);
  TokenBatchingOptions o = fixed_options(4, 2);
  o.balance = RankBalance::None;
  o.drop_last = true;
  const TokenEpochPlan plan = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(epoch_permutation(10, 0, 0), (std::vector<int64_t>{5, 2, 9, 6, 1, 8, 7, 3, 0, 4}));
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].ranks[0].sequences, (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(plan.steps[0].ranks[1].sequences, (std::vector<int64_t>{9, 6}));
  EXPECT_EQ(plan.steps[1].ranks[0].sequences, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(plan.steps[1].ranks[1].sequences, (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(plan.stats.dropped_sequences, 2);  // 0 and 4
}

TEST(TokenBatching, FixedLastStepRepeatsTheEpochsFirstRowsOrIsDropped) {
  const std::vector<int32_t> lengths{8, 16, 24, 32, 40, 48, 56, 64, 72, 80};
  TokenBatchingOptions o = fixed_options(8, 4);
  o.shuffle = false;
  o.balance = RankBalance::None;
  const TokenEpochPlan kept = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(kept.steps.size(), 2u);
  // Rows 8 and 9 are left; 0 and 1 fill the step to a multiple of 4 ranks.
  const std::vector<std::vector<int64_t>> last{{8}, {9}, {0}, {1}};
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(kept.steps[1].ranks[r].sequences, last[r]);
  EXPECT_EQ(kept.stats.repeated_sequences, 2);
  EXPECT_EQ(kept.stats.sequences, 12);
  EXPECT_EQ(kept.stats.batch_sizes, (std::map<int64_t, int64_t>{{1, 4}, {2, 4}}));

  o.drop_last = true;
  const TokenEpochPlan dropped = plan_token_epoch(lengths, o, 0);
  EXPECT_EQ(dropped.steps.size(), 1u);
  EXPECT_EQ(dropped.stats.dropped_sequences, 2);
  EXPECT_EQ(dropped.stats.sequences, 8);
}

// fairseq's batch_by_size on sorted lengths: grow while (rows + 1) x longest <= max_tokens, cut
// to a multiple of size_multiple, and cut the carried rows too when the next row does not fit
// beside them.
TEST(TokenBatching, MaxTokensBatchesAsFairseq) {
  TokenBatchingOptions o = max_tokens_options(12, 1);
  o.shuffle = false;
  o.balance = RankBalance::None;
  o.pad_to_multiple = 1;
  o.size_multiple = 2;
  const auto batches = [&](const std::vector<int32_t>& lengths) {
    std::vector<std::vector<int64_t>> out;
    for (const TokenStep& step : plan_token_epoch(lengths, o, 0).steps) out.push_back(step.ranks[0].sequences);
    return out;
  };
  // 5 rows before the first 3 (6 x 3 > 12): cut to 4; then {2, 3, 3, 3} = 12; then 2 x 6 = 12.
  EXPECT_EQ(batches({1, 1, 1, 2, 2, 3, 3, 3, 4, 6}),
            (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  // Six 2s, then a 6 (2 fit per batch): cut to 4, and the 2 carried rows cannot take the 6.
  o.size_multiple = 4;
  EXPECT_EQ(batches({2, 2, 2, 2, 2, 2, 6}), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5}, {6}}));
  // Sorted by length whatever the input order; equal lengths keep their order without shuffling.
  o.size_multiple = 1;
  EXPECT_EQ(batches({6, 2, 4, 2, 6}), (std::vector<std::vector<int64_t>>{{1, 3, 2}, {0, 4}}));
}

TEST(TokenBatching, MaxTokensBatchesFitTheBudgetInMultiplesOfEight) {
  const std::vector<int32_t> lengths = skewed_lengths(20000, 1);
  for (int world : {1, 4}) {
    for (RankBalance balance : {RankBalance::None, RankBalance::SortAndDeal}) {
      TokenBatchingOptions o = max_tokens_options(16384, world);
      o.balance = balance;
      o.seed = 11;
      const TokenEpochPlan plan = plan_token_epoch(lengths, o, 3);
      int64_t not_multiple = 0;
      for (const TokenStep& step : plan.steps) {
        for (const RankBatch& batch : step.ranks) {
          EXPECT_LE(batch.padded_tokens(), 16384);
          EXPECT_EQ(batch.padded_length % 8, 0);
          if (batch.num_rows() % 8 != 0) ++not_multiple;
        }
      }
      EXPECT_LE(plan.stats.max_padded_tokens, 16384);
      // Unbalanced, only the last batch formed (the longest sequences' rest) may miss the
      // multiple (8 rows of 512 always fit); the last step splits leftover batches on 4 ranks.
      if (balance == RankBalance::None) {
        EXPECT_LE(not_multiple, world == 1 ? 1 : 1 + 4) << "world " << world;
      }
    }
  }
}

TEST(TokenBatching, EverySequenceOncePerEpochOrAsTheRemainderRuleSays) {
  const std::vector<int32_t> lengths = skewed_lengths(1001, 2);
  for (TokenBatching batching : {TokenBatching::Fixed, TokenBatching::MaxTokens})
    for (SequencePacking packing : {SequencePacking::None, SequencePacking::Greedy})
      for (RankBalance balance : {RankBalance::None, RankBalance::SortAndDeal})
        for (int world : {1, 2, 3, 4})
          for (bool drop_last : {false, true}) {
            TokenBatchingOptions o =
                batching == TokenBatching::Fixed ? fixed_options(24 * world, world) : max_tokens_options(4096, world);
            o.packing = packing;
            o.balance = balance;
            o.drop_last = drop_last;
            const TokenEpochPlan plan = plan_token_epoch(lengths, o, 5);
            const std::string where = describe(plan.stats);
            int64_t missing = 0, extra = 0;
            for (int c : appearances(plan, lengths.size())) {
              missing += c == 0;
              extra += std::max(c - 1, 0);
            }
            EXPECT_EQ(missing, plan.stats.dropped_sequences) << where;
            EXPECT_EQ(extra, plan.stats.repeated_sequences) << where;
            EXPECT_EQ(drop_last ? extra : missing, 0) << where;
            EXPECT_EQ(plan.stats.sequences, 1001 - missing + extra) << where;
            int64_t rows = 0;
            for (const TokenStep& step : plan.steps) {
              ASSERT_EQ(step.ranks.size(), static_cast<size_t>(world));
              int64_t tokens = 0;
              for (const RankBatch& batch : step.ranks) {
                EXPECT_GE(batch.num_rows(), 1) << where;  // every rank has a batch every step
                tokens += batch.tokens;
                rows += batch.num_rows();
              }
              EXPECT_EQ(step.tokens, tokens);
            }
            EXPECT_EQ(rows, plan.stats.rows);
            if (batching == TokenBatching::Fixed && packing == SequencePacking::None && !drop_last) {
              EXPECT_EQ(plan.stats.steps, (1001 + 24 * world - 1) / (24 * world));
            }
          }
}

// Measured on 20,000 skewed lengths (mean 167.5 tokens, 842 at 512), 32 rows per rank (fixed)
// or 16384 padded tokens per rank batch (max_tokens); imbalance is per step the largest rank
// batch's padded tokens over the mean, and the stats give its mean over the epoch and the worst
// step. Measured (none -> sort_and_deal), mean / worst:
//   fixed       2 ranks  1.0363 / 1.3913 -> 1.0156 / 1.0756   (padding waste 66.0 % -> 42.1 %)
//   fixed       4 ranks  1.0435 / 1.2611 -> 1.0259 / 1.1191   (66.0 % -> 25.0 %)
//   max_tokens  2 ranks  1.0292 / 1.0940 -> 1.0122 / 1.0940   (2.7 % -> 3.4 %)
//   max_tokens  4 ranks  1.0397 / 1.0870 -> 1.0226 / 1.0667   (2.7 % -> 3.3 %)
// The max_tokens worst step on 2 ranks is 32 rows of 512 beside 32 rows padded to 424: no cut
// does better, as moving a single 512 row costs more than it saves.
TEST(TokenBatching, SortAndDealLowersRankImbalance) {
  const std::vector<int32_t> lengths = skewed_lengths(20000, 3);
  struct Case {
    TokenBatching batching;
    int world;
    double max_mean_balanced, max_worst_balanced, min_mean_unbalanced, min_worst_unbalanced;
  };
  const std::vector<Case> cases{
      {TokenBatching::Fixed, 2, 1.02, 1.08, 1.035, 1.35},
      {TokenBatching::Fixed, 4, 1.03, 1.12, 1.04, 1.25},
      {TokenBatching::MaxTokens, 2, 1.015, 1.095, 1.025, 1.09},
      {TokenBatching::MaxTokens, 4, 1.025, 1.07, 1.035, 1.08},
  };
  for (const Case& c : cases) {
    TokenBatchingOptions o =
        c.batching == TokenBatching::Fixed ? fixed_options(32 * c.world, c.world) : max_tokens_options(16384, c.world);
    o.seed = 5;
    o.balance = RankBalance::None;
    const TokenEpochPlan none = plan_token_epoch(lengths, o, 0);
    o.balance = RankBalance::SortAndDeal;
    const TokenEpochPlan dealt = plan_token_epoch(lengths, o, 0);
    const std::string where = (c.batching == TokenBatching::Fixed ? "fixed, " : "max_tokens, ") +
                              std::to_string(c.world) + " ranks\n  none: " + describe(none.stats) +
                              "\n  sort_and_deal: " + describe(dealt.stats);
    EXPECT_LE(dealt.stats.mean_imbalance, c.max_mean_balanced) << where;
    EXPECT_LE(dealt.stats.worst_imbalance, c.max_worst_balanced) << where;
    EXPECT_GE(none.stats.mean_imbalance, c.min_mean_unbalanced) << where;
    EXPECT_GE(none.stats.worst_imbalance, c.min_worst_unbalanced) << where;
    EXPECT_LT(dealt.stats.mean_imbalance, none.stats.mean_imbalance) << where;
    EXPECT_LE(dealt.stats.worst_imbalance, none.stats.worst_imbalance) << where;
    // The same steps hold the same sequences, dealt differently, and no step's largest rank batch
    // (what the step waits for) grows.
    ASSERT_EQ(dealt.steps.size(), none.steps.size());
    for (size_t s = 0; s < none.steps.size(); ++s) {
      EXPECT_EQ(dealt.steps[s].tokens, none.steps[s].tokens);
      EXPECT_LE(dealt.steps[s].max_rank_padded_tokens(), none.steps[s].max_rank_padded_tokens()) << "step " << s;
    }
    EXPECT_LT(dealt.stats.bottleneck_padded_tokens, none.stats.bottleneck_padded_tokens) << where;
    if (c.batching == TokenBatching::Fixed) {
      // Sorting the step also cuts the padding and what the epoch waits for by about half.
      EXPECT_LT(dealt.stats.padding_waste, 0.45) << where;
      EXPECT_LT(dealt.stats.bottleneck_padded_tokens * 10, none.stats.bottleneck_padded_tokens * 6) << where;
    } else {
      EXPECT_LE(dealt.stats.max_padded_tokens, 16384);
    }
  }
}

TEST(TokenBatching, PaddingWasteFixedVersusMaxTokensVersusPacking) {
  const std::vector<int32_t> lengths = skewed_lengths(20000, 4);
  TokenBatchingOptions fixed = fixed_options(64, 2);
  fixed.balance = RankBalance::None;
  TokenBatchingOptions max_tokens = max_tokens_options(16384, 2);
  max_tokens.balance = RankBalance::None;
  TokenBatchingOptions packed = max_tokens;
  packed.packing = SequencePacking::Greedy;
  const TokenEpochStats f = plan_token_epoch(lengths, fixed, 0).stats;
  const TokenEpochStats m = plan_token_epoch(lengths, max_tokens, 0).stats;
  const TokenEpochStats p = plan_token_epoch(lengths, packed, 0).stats;
  const std::string where = "fixed: " + describe(f) + "\nmax_tokens: " + describe(m) + "\npacked: " + describe(p);
  EXPECT_GT(f.padding_waste, 0.60) << where;  // random batches of 32 nearly always hold a 512
  EXPECT_LT(m.padding_waste, 0.04) << where;
  EXPECT_LT(p.padding_waste, 0.01) << where;
}

TEST(TokenBatching, PackingWastesUnderFivePercentAndNoRowExceedsMaxSeqLength) {
  const std::vector<int32_t> lengths = skewed_lengths(20000, 5);
  for (TokenBatching batching : {TokenBatching::Fixed, TokenBatching::MaxTokens}) {
    for (int world : {1, 2, 4}) {
      TokenBatchingOptions o =
          batching == TokenBatching::Fixed ? fixed_options(32 * world, world) : max_tokens_options(16384, world);
      o.packing = SequencePacking::Greedy;
      const TokenEpochPlan plan = plan_token_epoch(lengths, o, 1);
      const std::string where = describe(plan.stats);
      EXPECT_LT(plan.stats.padding_waste, 0.05) << where;
      EXPECT_GT(static_cast<double>(plan.stats.sequences) / static_cast<double>(plan.stats.rows), 2.5) << where;
      for (const TokenStep& step : plan.steps) {
        for (const RankBatch& batch : step.ranks) {
          EXPECT_LE(batch.padded_length, 512);
          for (int64_t r = 0; r < batch.num_rows(); ++r) {
            int64_t row_tokens = 0;
            for (int64_t s : batch.row(r)) row_tokens += lengths[static_cast<size_t>(s)];
            EXPECT_LE(row_tokens, 512);
            EXPECT_LE(row_tokens, batch.padded_length);
          }
        }
      }
    }
  }
}

TEST(TokenBatching, PackedRowsListTheirSequencesLongestFirst) {
  // Best fit decreasing into rows of 10: 7 | 6 | 5 then 4 into the 6's row (room 4), 3 into the
  // 7's (room 3), 2 into the 5's (room 5 -> 3), 1 into it (room 3 -> 2; the fullest that fits).
  const std::vector<int32_t> lengths{1, 2, 3, 4, 5, 6, 7};
  TokenBatchingOptions o = fixed_options(3, 1);
  o.packing = SequencePacking::Greedy;
  o.max_seq_length = 10;
  o.pad_to_multiple = 1;
  o.shuffle = false;
  const TokenEpochPlan plan = plan_token_epoch(lengths, o, 0);
  ASSERT_EQ(plan.steps.size(), 1u);
  const RankBatch& batch = plan.steps[0].ranks[0];
  ASSERT_EQ(batch.num_rows(), 3);
  EXPECT_EQ(std::vector<int64_t>(batch.row(0).begin(), batch.row(0).end()), (std::vector<int64_t>{6, 2}));
  EXPECT_EQ(std::vector<int64_t>(batch.row(1).begin(), batch.row(1).end()), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(std::vector<int64_t>(batch.row(2).begin(), batch.row(2).end()), (std::vector<int64_t>{4, 1, 0}));
  EXPECT_EQ(batch.padded_length, 10);
  EXPECT_EQ(batch.tokens, 28);
  EXPECT_DOUBLE_EQ(plan.stats.padding_waste, 2.0 / 30.0);  // rows of 10, 10 and 8
  EXPECT_ERROR_CONTAINS(batch.row(3), "row 3");
}

TEST(TokenBatching, RowLayoutGivesSequenceAndPositionIds) {
  const std::vector<int32_t> lengths{5, 9, 2, 3};
  std::vector<int64_t> sequence_ids(8, -1), position_ids(8, -1);
  const std::vector<int64_t> row{3, 2};
  row_layout(row, lengths, sequence_ids, position_ids);
  EXPECT_EQ(sequence_ids, (std::vector<int64_t>{1, 1, 1, 2, 2, 0, 0, 0}));
  EXPECT_EQ(position_ids, (std::vector<int64_t>{0, 1, 2, 0, 1, 0, 0, 0}));
  const std::vector<int64_t> too_long{1};
  EXPECT_ERROR_CONTAINS(row_layout(too_long, lengths, sequence_ids, position_ids),
                        "more tokens than its padded length 8");
  std::vector<int64_t> short_positions(7);
  EXPECT_ERROR_CONTAINS(row_layout(row, lengths, sequence_ids, short_positions), "both must have");
  const std::vector<int64_t> unknown{4};
  EXPECT_ERROR_CONTAINS(row_layout(unknown, lengths, sequence_ids, position_ids), "sequence 4 is outside");
}

TEST(TokenBatching, PlansAreDeterministicAndChangeAcrossEpochs) {
  const std::vector<int32_t> lengths = skewed_lengths(3000, 6);
  for (TokenBatching batching : {TokenBatching::Fixed, TokenBatching::MaxTokens}) {
    for (SequencePacking packing : {SequencePacking::None, SequencePacking::Greedy}) {
      TokenBatchingOptions o = batching == TokenBatching::Fixed ? fixed_options(64, 4) : max_tokens_options(8192, 4);
      o.packing = packing;
      o.seed = 99;
      const auto a = layout(plan_token_epoch(lengths, o, 2));
      EXPECT_EQ(layout(plan_token_epoch(lengths, o, 2)), a);  // every rank, every run
      const TokenEpochPlan next = plan_token_epoch(lengths, o, 3);
      EXPECT_NE(layout(next), a);
      EXPECT_EQ(next.steps.size(), a.size() / 8);  // the same number of steps every epoch
      o.seed = 100;
      EXPECT_NE(layout(plan_token_epoch(lengths, o, 2)), a);
      o.shuffle = false;
      EXPECT_EQ(layout(plan_token_epoch(lengths, o, 2)), layout(plan_token_epoch(lengths, o, 3)));
    }
  }
}

TEST(TokenBatching, ErrorsNameTheConfigKeyToChange) {
  const std::vector<int32_t> good{10, 20, 30};
  const TokenBatchingOptions mt = max_tokens_options(1024, 1);
  EXPECT_EQ(error_of([&] {
              plan_token_epoch(std::vector<int32_t>{10, 600, 700, 20}, mt, 0);
            }),
            "sequence 1 has 600 tokens, more than data.max_seq_length 512 (2 sequences are longer; the longest, "
            "sequence 2, has 700): raise data.max_seq_length to at least 700 (the model's position embeddings "
            "permitting) or truncate the sequences when preparing the data");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{10, 513}, mt, 0),
                        "sequence 1 has 513 tokens, more than data.max_seq_length 512: raise");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{10, 0, 5}, mt, 0),
                        "sequence 1 has 0 tokens: every sequence needs at least one, so the data is broken");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{-3}, mt, 0), "sequence 0 has -3 tokens");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{}, mt, 0), "the data set has no sequences");

  EXPECT_EQ(error_of([&] { plan_token_epoch(good, fixed_options(30, 4), 0); }),
            "data.batch_size 30 is the global batch and must be divisible by the world size 4 (each rank takes "
            "batch_size / world_size); choose a multiple of 4");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, fixed_options(0, 1), 0), "data.batch_size must be at least 1");

  EXPECT_EQ(error_of([&] {
              plan_token_epoch(std::vector<int32_t>{10, 300, 20}, max_tokens_options(256, 1), 0);
            }),
            "sequence 1 has 300 tokens, 304 padded (data.pad_to_multiple 8), more than data.max_tokens 256 allows in "
            "a rank batch: raise data.max_tokens to at least 304 (the longest sequence's padded length)");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{10, 256, 20}, max_tokens_options(255, 1), 0),
                        "sequence 1 has 256 tokens, more than data.max_tokens 255");
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, max_tokens_options(0, 1), 0), "data.max_tokens must be at least 1");
  // The caller names the sequences (dptrain: with the shard that holds them) ...
  TokenBatchingOptions named = max_tokens_options(1024, 1);
  named.name_sequence = [](int64_t i) { return "line " + std::to_string(i + 1) + " of corpus.txt"; };
  EXPECT_ERROR_CONTAINS(plan_token_epoch(std::vector<int32_t>{10, 600}, named, 0),
                        "line 2 of corpus.txt has 600 tokens, more than data.max_seq_length 512");
  // ... and evaluation's rank slices name them by their index in the whole set, not in the slice.
  const std::vector<int32_t> eval_lengths{10, 20, 30, 40, 50, 900};
  EXPECT_ERROR_CONTAINS(TokenBatchSampler::for_evaluation(eval_lengths, mt, 1, 2),
                        "sequence 5 has 900 tokens, more than data.max_seq_length 512");
  EXPECT_ERROR_CONTAINS(TokenBatchSampler::for_evaluation(eval_lengths, named, 1, 2),
                        "line 6 of corpus.txt has 900 tokens");
  TokenBatchingOptions packed = max_tokens_options(256, 1);
  packed.packing = SequencePacking::Greedy;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, packed, 0),
                        "data.max_tokens 256 is less than one packed row of data.max_seq_length 512 tokens: raise "
                        "data.max_tokens to at least 512");

  // Options that leave the epoch without a step.
  TokenBatchingOptions big = fixed_options(8, 2);
  big.drop_last = true;
  EXPECT_EQ(error_of([&] { plan_token_epoch(good, big, 0); }),
            "data.batch_size 8 is larger than the 3 sequences of an epoch and data.drop_last is true, so the epoch "
            "has no step: lower data.batch_size to at most 2 or set data.drop_last: false");
  TokenBatchingOptions few = max_tokens_options(1024, 4);
  few.drop_last = true;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, few, 0),
                        "the 3 sequences make fewer rank batches of data.max_tokens 1024 than the world size 4");
  few.drop_last = false;  // then the one batch is split, a row per rank, repeating the first
  const TokenEpochPlan split = plan_token_epoch(good, few, 0);
  EXPECT_EQ(split.stats.steps, 1);
  EXPECT_EQ(split.stats.repeated_sequences, 1);

  TokenBatchingOptions bad = mt;
  bad.world_size = 0;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, bad, 0), "world_size must be at least 1");
  bad = mt;
  bad.max_seq_length = 0;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, bad, 0), "data.max_seq_length must be in [1, 2147483647]");
  bad = mt;
  bad.pad_to_multiple = 0;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, bad, 0), "data.pad_to_multiple must be at least 1");
  bad = mt;
  bad.size_multiple = 0;
  EXPECT_ERROR_CONTAINS(plan_token_epoch(good, bad, 0), "data.size_multiple must be at least 1");
}

TEST(TokenBatching, DescribeIsOneLineForLogs) {
  TokenEpochStats stats;
  stats.padding_waste = 0.1234;
  stats.mean_imbalance = 1.0234;
  stats.worst_imbalance = 1.081;
  stats.steps = 412;
  stats.rows = stats.sequences = 100;
  stats.batch_sizes = {{8, 10}, {16, 300}, {24, 102}};
  stats.padded_lengths = {{128, 80}, {512, 332}};
  EXPECT_EQ(describe(stats),
            "padding waste 12.3 % | rank imbalance mean 1.02 worst 1.08 | 412 steps | batch sizes 8:10 16:300 24:102 "
            "| padded lengths 128:80 512:332");

  // More than 8 sizes: the 8 most frequent in size order; packing and the remainder when present.
  stats.batch_sizes.clear();
  for (int64_t size = 1; size <= 10; ++size) stats.batch_sizes[size] = size == 3 ? 1 : 10 + size;
  stats.padded_lengths = {{512, 412}};
  stats.sequences = 310;
  stats.dropped_sequences = 7;
  stats.repeated_sequences = 2;
  stats.steps = 1;
  EXPECT_EQ(describe(stats),
            "padding waste 12.3 % | rank imbalance mean 1.02 worst 1.08 | 1 step | batch sizes 2:12 4:14 5:15 6:16 "
            "7:17 8:18 9:19 10:20 +2 more | padded lengths 512:412 | 3.10 sequences per row | 7 sequences dropped "
            "(data.drop_last) | 2 sequences repeated to fill the last step");
}

}  // namespace
}  // namespace dp
