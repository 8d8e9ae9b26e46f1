// BERT's masked-LM masking, done when a sequence is loaded (dynamic masking, as RoBERTa), with
// the proportions of Google BERT's create_masked_lm_predictions:
//   * the candidates are the sequence's tokens other than [CLS], [SEP], [PAD] and [MASK]
//     ([UNK] is a candidate, as in Google's code);
//   * it predicts n = min(max_predictions, candidates, max(1, round(mask_prob * candidates)))
//     positions, a uniformly random n-subset of the candidates (round half up);
//   * each predicted position independently becomes [MASK] with probability mask_token_prob
//     (0.8), a random token with probability random_token_prob (0.1), and keeps its token
//     otherwise (0.1). The random token is uniform over the vocabulary minus its special tokens
//     ([PAD], [UNK], [CLS], [SEP], [MASK]; Google draws from every id), so a replacement never
//     adds structure the model could read; it may equal the original token, as in Google's code.
//
// Reproducible and order independent: every random number for a sequence comes from one
// SplitMix64 stream (runtime/text/corpus.h) keyed by SplitMix64::key(seed, epoch, index), a pure
// function of those three numbers. Any rank or loader thread masking sequence `index` in `epoch`
// gets the same masks whatever else it masked before; another epoch gets other masks. The
// positions are chosen with selection sampling (Knuth's Algorithm S: one pass, each candidate
// taken with probability needed / left), so no scratch memory is needed and they come out in
// ascending order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/text/corpus.h"
#include "runtime/text/wordpiece.h"

namespace dp::text {

// The label of a position that is not predicted (PyTorch cross_entropy's default ignore_index).
inline constexpr int32_t kIgnoreLabel = -100;

struct MlmMaskingOptions {
  double mask_prob = 0.15;         // share of the candidate tokens predicted
  int max_predictions = 20;        // per sequence: Google uses 20 for length 128, 76 for 512
  double mask_token_prob = 0.8;    // a predicted token becomes [MASK]
  double random_token_prob = 0.1;  // ... or a random token; kept otherwise (1 - the two)
  uint64_t seed = 0;
};

// A max_predictions that never binds for sequences of at most `max_seq_length` tokens:
// ceil(mask_prob * max_seq_length), 20 for 128 and 77 for 512 (a sequence has at most
// max_seq_length - 2 candidates, and round(0.15 * 126) = 19, round(0.15 * 510) = 77).
int default_max_predictions(int max_seq_length, double mask_prob = 0.15);

struct MlmPrediction {
  int32_t position;  // index in the sequence
  int32_t label;     // the original token id there
  bool operator==(const MlmPrediction&) const = default;
};

struct MaskedSequence {
  std::vector<int32_t> input_ids;           // the sequence with the predicted positions replaced
  std::vector<MlmPrediction> predictions;   // in ascending position
  std::vector<int32_t> labels;              // [length]: the original id where predicted, else kIgnoreLabel
};

class MlmMasker {
 public:
  // Needs [MASK] in `vocab` and at least one token that is not special; [CLS], [SEP] and [PAD]
  // are left alone when present. Throws dp::Error for options out of range (each named).
  MlmMasker(const Vocabulary& vocab, MlmMaskingOptions options = {});

  const MlmMaskingOptions& options() const { return options_; }
  size_t vocab_size() const { return vocab_size_; }
  int32_t mask_id() const { return mask_id_; }
  bool is_special(int32_t id) const;
  // Positions predicted in a sequence with `candidates` maskable tokens.
  size_t num_predictions(size_t candidates) const;

  // Positions mask() predicts in `ids`, whatever the epoch: num_predictions of its candidates.
  size_t predictions_in(std::span<const int32_t> ids) const;

  // Masks `ids` (one sequence, possibly padded with [PAD]) for (options().seed, epoch, index).
  // Throws dp::Error for an id outside the vocabulary.
  MaskedSequence mask(std::span<const int32_t> ids, uint64_t epoch, uint64_t index) const;

  // The same into the caller's buffers, allocating nothing but what `predictions` grows by:
  // `input_ids_out` must have ids.size() elements; `labels_out` ids.size() or none (skipped);
  // predictions are appended to `*predictions` when it is given. Returns the number of
  // predictions. `ids` and `input_ids_out` may be the same memory (in-place masking).
  size_t mask_into(std::span<const int32_t> ids, uint64_t epoch, uint64_t index, std::span<int32_t> input_ids_out,
                   std::span<int32_t> labels_out, std::vector<MlmPrediction>* predictions = nullptr) const;

 private:
  int32_t random_token(SplitMix64& rng) const;

  MlmMaskingOptions options_;
  size_t vocab_size_;
  int32_t mask_id_;
  std::vector<int32_t> never_masked_;  // [CLS], [SEP], [PAD], [MASK] present in the vocabulary
  std::vector<int32_t> specials_;      // sorted: those and [UNK]; never drawn as random tokens
};

}  // namespace dp::text
