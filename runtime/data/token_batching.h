// Token batching for sequence models (BERT pretraining): which sequences each rank trains on at
// each step of an epoch, so that little compute goes to padding and no rank holds the others up.
// A plan is a pure function of (sequence lengths, options, epoch): no I/O, no threads, no global
// state, so every rank computes the same plan on its own and a run is reproducible.
//
// Vocabulary: a *row* is one line of a [rows, padded_length] batch tensor. Without packing a row
// is one sequence; with packing it holds several (attention stays inside each sequence). A *rank
// batch* is one rank's rows for one step, every row padded to the batch's `padded_length`: its
// longest row rounded up to a multiple of data.pad_to_multiple (never above data.max_seq_length).
// Its *padded tokens* (rows x padded_length) are what it costs in compute and memory.
//
// NOTE [ Token batching ]
// Batching (data.batching):
//  - Fixed: the epoch's rows in shuffled order (NOTE [ Deterministic epochs ] in sampler.h), cut
//    into global batches of data.batch_size rows, split into world_size equal, consecutive rank
//    batches. Each rank pads to its own longest row. The wasteful baseline.
//  - MaxTokens (fairseq's max_tokens, data_utils.batch_by_size): the rows are shuffled, then
//    stably sorted by length (so rows of equal length come in a new order every epoch), and cut
//    left to right into rank batches: a batch grows while (rows + 1) x padded length of the next,
//    longest, row <= data.max_tokens; when it is full it is cut to a multiple of
//    data.size_multiple rows if it has at least that many (the rest start the next batch). The
//    cost uses the padded length (pad_to_multiple rounding included), which is what is computed.
//    Sorting everything and then shuffling the order of the batches (fairseq's choice, rather
//    than sorting within shuffled chunks) keeps padding lowest; randomness comes from the batch
//    order and from the new order of equal lengths. Consecutive world_size batches of the
//    shuffled batch order make a step, so a step mixes lengths from across the data set.
//  Either way the number of steps is the same every epoch (batch boundaries depend only on the
//  sorted lengths, and packing only on lengths), so steps per epoch can be read from epoch 0.
//
// Remainder (data.drop_last): rows (Fixed) or batches (MaxTokens) that do not fill a last step.
//  - true: left out this epoch (which ones changes with the shuffle).
//  - false (default): they form a smaller last step. Fixed pads its rows to a multiple of
//    world_size, MaxTokens to at least world_size rows, with the epoch's first rows repeated
//    (PyTorch DistributedSampler's rule), so every rank has a batch in every step. MaxTokens then
//    splits the leftover batches (the one with the most rows in halves, again and again; a part of
//    a batch fits the budget when the batch did) until every rank has one, or balances them.
//  Stats count the rows left out and repeated.
//
// Balancing (data.balance), per step:
//  - None: rank r takes the r-th consecutive part (Fixed) or the step's r-th batch (MaxTokens).
//  - SortAndDeal: the step's rows are pooled, sorted by length, longest first, and dealt to ranks
//    as world_size consecutive runs, with the cut points chosen to minimise the largest rank's
//    padded tokens (what a synchronous step waits for; binary search on that bound, each test
//    greedy in O(world_size)). Consecutive runs rather than snake order or greedy dealing: a rank
//    batch costs rows x its longest row, so dealing one long row to every rank would make every
//    rank pad to it; runs keep each rank's rows of similar length, and some assignment that
//    minimises the largest cost is always such a run split (of two rows on two ranks, giving
//    the longer to the rank padded longer never raises either rank's cost). Of the cuts that
//    reach the bound, filled from the longest rows or from the shortest, the one with less
//    padding is kept. The step's sequences and real tokens stay the same; rank batch sizes
//    become unequal (Fixed included) and ignore data.size_multiple (the GEMMs' M = rows x
//    padded_length is a multiple of 8 anyway through pad_to_multiple). With MaxTokens no rank
//    exceeds data.max_tokens: the step's own batches are such a run split, so the optimum never
//    exceeds it. No step's largest rank batch grows; some short rows may move to a rank padded
//    longer (padding on a rank that would otherwise idle), so with MaxTokens the padding waste
//    rises a little while the imbalance and TokenEpochStats::bottleneck_padded_tokens fall.
//
// Packing (data.packing):
//  - Greedy: before batching, best-fit decreasing into rows of data.max_seq_length tokens (the
//    longest sequence first; each goes into the open row with the least room that still fits it,
//    found in a map of rows by free room, O(n log n); shortest-pack-first histogram packing,
//    Krell et al. 2021, used for MLPerf BERT, is the same idea on a histogram of lengths).
//    Every epoch's rows have the same lengths; which sequences of equal length share a row
//    follows the epoch's shuffle. Batching and balancing then work on rows, and
//    data.batch_size counts rows. Each row lists its sequences (row_layout below builds the
//    position ids, restarting per sequence, and the sequence ids for a block-diagonal mask).
//
// Loss: the caller normalises by the global count of predicted tokens per step; TokenStep::tokens
// (real tokens summed over ranks) and TokenStep::sequences are the step's global counts, equal on
// every rank without a collective.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "runtime/data/sampler.h"

namespace dp {

enum class TokenBatching { Fixed, MaxTokens };  // data.batching
enum class RankBalance { None, SortAndDeal };   // data.balance
enum class SequencePacking { None, Greedy };    // data.packing

struct TokenBatchingOptions {
  TokenBatching batching = TokenBatching::MaxTokens;
  int64_t batch_size = 0;        // Fixed: rows per GLOBAL step, divisible by world_size
  int64_t max_tokens = 0;        // MaxTokens: padded tokens (rows x padded length) per RANK batch
  int64_t max_seq_length = 512;  // longest allowed sequence; also the packed row length
  int64_t size_multiple = 8;     // MaxTokens batch sizes a multiple of this when they have that many
  int64_t pad_to_multiple = 8;   // padded length rounded up to a multiple of this (<= max_seq_length)
  RankBalance balance = RankBalance::SortAndDeal;
  SequencePacking packing = SequencePacking::None;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;  // the same on every rank
  bool drop_last = false;
  // Names sequence i of the lengths given, for errors ("sequence 7 of the shard /data/wiki/00");
  // unset: "sequence i".
  std::function<std::string(int64_t)> name_sequence;
};

// One rank's part of one step.
struct RankBatch {
  std::vector<int64_t> sequences;   // sequence indices, row after row
  std::vector<int64_t> row_starts;  // row r holds sequences[row_starts[r], row_starts[r + 1])
  int64_t padded_length = 0;        // every row padded to this
  int64_t tokens = 0;               // real tokens

  int64_t num_rows() const { return row_starts.empty() ? 0 : static_cast<int64_t>(row_starts.size()) - 1; }
  std::span<const int64_t> row(int64_t r) const;
  int64_t padded_tokens() const { return num_rows() * padded_length; }
};

struct TokenStep {
  std::vector<RankBatch> ranks;  // world_size entries, none empty
  int64_t tokens = 0;            // real tokens over all ranks: the loss normaliser
  int64_t sequences = 0;         // sequences over all ranks
  int64_t padded_tokens = 0;     // over all ranks

  // Largest rank batch's padded tokens / the mean over ranks (1 = perfectly balanced).
  double imbalance() const;
  int64_t max_rank_padded_tokens() const;
  // 1 - tokens / padded_tokens.
  double padding_waste() const;
};

struct TokenEpochStats {
  int64_t steps = 0;
  int64_t rows = 0;
  int64_t sequences = 0;           // trained this epoch; a repeated one counts each time
  int64_t dropped_sequences = 0;   // left out by data.drop_last
  int64_t repeated_sequences = 0;  // trained a second time to fill the last step
  int64_t tokens = 0;              // real
  int64_t padded_tokens = 0;
  double padding_waste = 0;   // 1 - tokens / padded_tokens over the epoch
  double mean_imbalance = 1;  // TokenStep::imbalance, mean over steps
  double worst_imbalance = 1;
  int64_t worst_imbalance_step = 0;
  int64_t max_rows = 0;           // most rows of any rank batch: the loader's buffer capacity
  int64_t max_padded_tokens = 0;  // largest rank batch
  // Sum over steps of the step's largest rank batch: what a synchronous epoch waits for, in
  // padded tokens per rank (ranks with less wait for it).
  int64_t bottleneck_padded_tokens = 0;
  std::map<int64_t, int64_t> batch_sizes;     // rows per rank batch -> rank batches
  std::map<int64_t, int64_t> padded_lengths;  // padded length -> rank batches
};

struct TokenEpochPlan {
  std::vector<TokenStep> steps;
  TokenEpochStats stats;
};

// The epoch's plan (NOTE [ Token batching ]). lengths[i] is sequence i's token count. Throws
// dp::Error naming the config key to change for invalid options, a sequence longer than
// data.max_seq_length or than data.max_tokens allows, a sequence of no tokens, no sequences, and
// an epoch without a single step.
TokenEpochPlan plan_token_epoch(std::span<const int32_t> lengths, const TokenBatchingOptions& options, int64_t epoch);

// A row of `length` real tokens padded as the options pad it: up to a multiple of
// pad_to_multiple, at most max_seq_length (length must be in [1, max_seq_length]).
int64_t padded_row_length(int64_t length, const TokenBatchingOptions& options);

// "padding waste 12.3 % | rank imbalance mean 1.02 worst 1.08 | 412 steps | batch sizes 8:10
// 16:300 24:102 | padded lengths 128:80 512:332" (the 8 most frequent sizes and lengths, then
// "+N more"; then sequences per row when packed, and dropped / repeated sequences when any).
std::string describe(const TokenEpochStats& stats);

// One row's per-token inputs, written into spans of the row's padded length: sequence_ids 1, 2,
// ... for the row's first, second, ... sequence and 0 on padding (packed_attention_mask in
// models/bert.h takes them), position_ids 0, 1, ... restarting at each sequence and 0 on padding.
void row_layout(std::span<const int64_t> row, std::span<const int32_t> lengths, std::span<int64_t> sequence_ids,
                std::span<int64_t> position_ids);

// The loader's view of a token-batching plan: this rank's batches of plan_token_epoch, as an
// EpochPlan of rows (RowBatch) for Dataset::fill_rows. Every rank builds the same plan from the
// same lengths, so each knows the step's global counts without a collective: RowBatch::step_targets
// is the sum of `targets` (e.g. the tokens each sequence predicts) over the step's sequences on
// every rank.
class TokenBatchSampler final : public BatchSampler {
 public:
  // lengths[i], targets[i]: sequence i's tokens and targets (targets empty: step_targets 0).
  // Throws plan_token_epoch's errors for epoch 0.
  TokenBatchSampler(std::vector<int32_t> lengths, std::vector<int32_t> targets, const TokenBatchingOptions& options,
                    int rank);
  // Evaluation: this rank's contiguous part of the sequences (rank r of W: [r n / W, (r + 1) n / W)),
  // each exactly once, sorted by length and cut by `options` on one rank (no shuffle, balance or
  // repetition). A rank whose part is empty gets no batch.
  static std::unique_ptr<TokenBatchSampler> for_evaluation(std::span<const int32_t> lengths,
                                                           TokenBatchingOptions options, int rank, int world_size);

  EpochPlan plan(int64_t epoch) const override;
  int64_t num_batches(int64_t epoch) const override;  // the same every epoch (NOTE [ Token batching ])
  // Most rows a batch of any epoch may hold: the rows of the largest batch for fixed batching
  // without balancing, else a bound (balancing moves rows between ranks from epoch to epoch).
  int64_t max_batch_size() const override { return max_rows_; }
  // The whole epoch's plan statistics (all ranks): those of the latest plan() when it was for
  // `epoch` (the trainer reads them after the epoch), else planned anew.
  TokenEpochStats epoch_stats(int64_t epoch) const;
  const TokenBatchingOptions& options() const { return options_; }
  // Epoch 0's largest rank batch in padded tokens, and its rows and padded length (pre-allocation).
  const RankBatch& largest_batch() const { return largest_; }

 private:
  TokenBatchSampler() = default;
  // Steps, largest batch and buffer rows from epoch 0's plan.
  void take_first_plan(const TokenEpochPlan& first);

  std::vector<int32_t> lengths_, targets_;
  std::vector<int64_t> ids_;  // for_evaluation: the dataset index of each of lengths_; empty: identity
  TokenBatchingOptions options_;
  int rank_ = 0;
  int64_t steps_ = 0;
  int64_t max_rows_ = 0;
  RankBatch largest_;
  mutable std::mutex stats_mutex_;  // plan() and epoch_stats() may run on different threads
  mutable int64_t stats_epoch_ = -1;
  mutable TokenEpochStats stats_;  // of stats_epoch_
};

}  // namespace dp
