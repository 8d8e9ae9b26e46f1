// Masked-LM batches from token shards: what the trainer's data loader fills for BERT pretraining.
//
// NOTE [ MLM batches ]
// A batch is a RowBatch of the token-batching plan (runtime/data/token_batching.h): rows of one
// or more sequences, padded to the batch's padded length L. Each sequence is masked as it is
// loaded (runtime/text/mlm_masking.h, keyed by (seed, epoch, sequence index): any rank or thread
// gets the same masks). The batch holds, for R rows:
//   input_ids       int64 [R, L]  masked token ids, [PAD] after the row's sequences
//   token_type_ids  int64 [R, L]  0 for segment A, 1 from segment B's start, 0 on padding
//   position_ids    int64 [R, L]  0, 1, ... restarting at each sequence of the row, 0 on padding
//   sequence_ids    int64 [R, L]  1, 2, ... for the row's sequences, 0 on padding (the attention mask)
//   mlm_positions   int64 [R, P]  the predicted tokens as indices into the batch's R x L tokens
//   mlm_labels      int64 [R, P]  their original ids; -100 on the unused slots
//   mlm_weights     float32 [R, P] 1 / (predicted tokens of the whole step over all ranks) for a
//                                  training batch, 1 in evaluation; 0 on the unused slots
// P, the batch's prediction slots per row, is the most any of its rows predicts (at least 1);
// unused slots point at the row's first token. Gathering the predicted positions before the MLM
// head (NVIDIA's and MLPerf's BERT do the same) keeps the vocabulary-wide GEMM to the ~15 % of
// tokens that need it. The weights make the training loss sum(weights x cross-entropy) the step's
// mean over its predicted tokens however the rows are split over ranks (the trainer scales by the
// world size for the gradient all-reduce's average).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/text/mlm_masking.h"
#include "runtime/text/text_shards.h"

namespace dp::text {

inline constexpr const char* kInputIds = "input_ids";
inline constexpr const char* kTokenTypeIds = "token_type_ids";
inline constexpr const char* kPositionIds = "position_ids";
inline constexpr const char* kSequenceIds = "sequence_ids";
inline constexpr const char* kMlmPositions = "mlm_positions";
inline constexpr const char* kMlmLabels = "mlm_labels";
inline constexpr const char* kMlmWeights = "mlm_weights";

class MlmDataset final : public Dataset {
 public:
  // Over `data`, opened with `vocab` (TextDataset::open). `name` describes the split in messages
  // ("training text"). Counts every sequence's predicted tokens (one pass over the tokens).
  MlmDataset(TextDataset data, std::shared_ptr<const Vocabulary> vocab, const MlmMaskingOptions& masking,
             bool training, const std::string& name);

  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  const std::string& description() const override { return description_; }
  uint64_t content_digest() const override { return content_digest_; }  // every sequence's tokens, the vocabulary size
  int64_t sample_bytes() const override;  // one row of max_seq_length tokens
  // Row buffers [capacity, max_seq_length] (mlm_* [capacity, max_seq_length] too: a row predicts
  // at most its tokens).
  Batch allocate_batch(int64_t capacity, Device device) const override;
  // Always throws: MLM data is batched by tokens (fill_rows).
  void fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const override;
  Batch fill_rows(const RowBatch& batch, int64_t epoch, const Batch& buffers) const override;

  const TextDataset& text() const { return data_; }
  const Vocabulary& vocab() const { return *vocab_; }
  const MlmMasker& masker() const { return masker_; }
  int max_seq_length() const { return data_.max_seq_length(); }
  std::span<const int32_t> lengths() const { return data_.lengths(); }
  // Tokens each sequence predicts (the same every epoch: it depends on the count of maskable tokens).
  const std::vector<int32_t>& targets() const { return targets_; }
  int64_t total_targets() const { return total_targets_; }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  TextDataset data_;
  MlmMasker masker_;
  bool training_;
  std::string description_;
  std::vector<int32_t> targets_;
  int64_t total_targets_ = 0;
  uint64_t content_digest_ = 0;
};

}  // namespace dp::text
