#include "runtime/text/mlm_masking.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/core/error.h"

namespace dp::text {

int default_max_predictions(int max_seq_length, double mask_prob) {
  DP_CHECK(max_seq_length >= 1, "default_max_predictions: max_seq_length must be positive, got ", max_seq_length);
  DP_CHECK(mask_prob > 0.0 && mask_prob <= 1.0, "default_max_predictions: mask_prob must be in (0, 1], got ",
           mask_prob);
  return std::max(1, static_cast<int>(std::ceil(mask_prob * max_seq_length)));
}

MlmMasker::MlmMasker(const Vocabulary& vocab, MlmMaskingOptions options)
    : options_(options), vocab_size_(vocab.size()), mask_id_(vocab.mask_id()) {
  const MlmMaskingOptions& o = options_;
  DP_CHECK(o.mask_prob > 0.0 && o.mask_prob <= 1.0, "masked LM: mask_prob must be in (0, 1], got ", o.mask_prob,
           " (BERT uses 0.15)");
  DP_CHECK(o.max_predictions >= 1, "masked LM: max_predictions must be at least 1, got ", o.max_predictions,
           " (BERT uses 20 for sequences of 128 tokens, 76-80 for 512)");
  DP_CHECK(o.mask_token_prob >= 0.0 && o.random_token_prob >= 0.0 && o.mask_token_prob + o.random_token_prob <= 1.0,
           "masked LM: mask_token_prob (", o.mask_token_prob, ") and random_token_prob (", o.random_token_prob,
           ") must be non-negative with a sum of at most 1 (BERT uses 0.8 and 0.1; the rest keeps the token)");
  DP_CHECK(vocab_size_ <= static_cast<size_t>(INT32_MAX), "masked LM: vocabulary ", vocab.source(), " is too large");
  for (const std::string_view token : {kClsToken, kSepToken, kPadToken, kMaskToken}) {
    if (const auto id = vocab.find(token)) never_masked_.push_back(*id);
  }
  specials_ = never_masked_;
  if (const auto id = vocab.find(kUnkToken)) specials_.push_back(*id);
  std::sort(never_masked_.begin(), never_masked_.end());
  std::sort(specials_.begin(), specials_.end());
  DP_CHECK(specials_.size() < vocab_size_, "masked LM: vocabulary ", vocab.source(),
           " has only special tokens; there is nothing to draw random replacements from");
}

bool MlmMasker::is_special(int32_t id) const {
  // At most four ids: a linear scan beats a set.
  return std::find(never_masked_.begin(), never_masked_.end(), id) != never_masked_.end();
}

size_t MlmMasker::num_predictions(size_t candidates) const {
  if (candidates == 0) return 0;
  const auto wanted = static_cast<size_t>(std::floor(static_cast<double>(candidates) * options_.mask_prob + 0.5));
  return std::min({std::max<size_t>(1, wanted), static_cast<size_t>(options_.max_predictions), candidates});
}

size_t MlmMasker::predictions_in(std::span<const int32_t> ids) const {
  size_t candidates = 0;
  for (const int32_t id : ids) candidates += is_special(id) ? 0 : 1;
  return num_predictions(candidates);
}

int32_t MlmMasker::random_token(SplitMix64& rng) const {
  // The r-th id that is not special: skip past each special id at or below it (sorted).
  auto r = static_cast<int64_t>(rng.below(vocab_size_ - specials_.size()));
  for (const int32_t s : specials_) {
    if (s <= r) ++r;
  }
  return static_cast<int32_t>(r);
}

size_t MlmMasker::mask_into(std::span<const int32_t> ids, uint64_t epoch, uint64_t index,
                            std::span<int32_t> input_ids_out, std::span<int32_t> labels_out,
                            std::vector<MlmPrediction>* predictions) const {
  const size_t n = ids.size();
  DP_CHECK(input_ids_out.size() == n, "masked LM: the output has room for ", input_ids_out.size(),
           " ids, the sequence has ", n);
  DP_CHECK(labels_out.empty() || labels_out.size() == n, "masked LM: the labels have room for ", labels_out.size(),
           " positions, the sequence has ", n, " (give ", n, " or none)");
  DP_CHECK(n <= static_cast<size_t>(INT32_MAX), "masked LM: sequence of ", n, " tokens is too long");
  size_t candidates = 0;
  for (size_t i = 0; i < n; ++i) {
    DP_CHECK(ids[i] >= 0 && static_cast<size_t>(ids[i]) < vocab_size_, "masked LM: sequence ", index, " has id ",
             ids[i], " at position ", i, ", outside the vocabulary of ", vocab_size_,
             " tokens (were the data made with another vocab.txt?)");
    candidates += is_special(ids[i]) ? 0 : 1;
  }
  SplitMix64 rng(SplitMix64::key(options_.seed, epoch, index));
  size_t needed = num_predictions(candidates);
  const size_t chosen = needed;
  size_t left = candidates;
  const double mask_below = options_.mask_token_prob;
  const double random_below = options_.mask_token_prob + options_.random_token_prob;
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];  // read before a write, so ids and input_ids_out may alias
    int32_t label = kIgnoreLabel;
    int32_t out = id;
    if (needed > 0 && !is_special(id)) {
      // Algorithm S: take this candidate with probability needed / left.
      if (rng.below(left) < needed) {
        --needed;
        label = id;
        const double u = rng.uniform();
        if (u < mask_below) {
          out = mask_id_;
        } else if (u < random_below) {
          out = random_token(rng);
        }
        if (predictions != nullptr) predictions->push_back({static_cast<int32_t>(i), id});
      }
      --left;
    }
    input_ids_out[i] = out;
    if (!labels_out.empty()) labels_out[i] = label;
  }
  DP_ASSERT(needed == 0);
  return chosen;
}

MaskedSequence MlmMasker::mask(std::span<const int32_t> ids, uint64_t epoch, uint64_t index) const {
  MaskedSequence out;
  out.input_ids.resize(ids.size());
  out.labels.resize(ids.size());
  out.predictions.reserve(static_cast<size_t>(options_.max_predictions));
  mask_into(ids, epoch, index, out.input_ids, out.labels, &out.predictions);
  return out;
}

}  // namespace dp::text
