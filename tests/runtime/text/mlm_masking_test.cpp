// Masked-LM masking at load time: the share of predicted tokens (~15 %), the 80/10/10 split,
// special tokens never touched, the max_predictions bound, labels, reproducibility from
// (seed, epoch, index) whatever the order, and the option checks.
#include "runtime/text/mlm_masking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "common/expect_error.h"

namespace dp::text {
namespace {

constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4, kFirstWord = 5;

Vocabulary word_vocab(int words) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int k = 0; k < words; ++k) tokens.push_back("w" + std::to_string(k));
  return Vocabulary(std::move(tokens));
}

// Sequence i of a synthetic data set: [CLS] A [SEP] B [SEP] with random words (an [UNK] now and
// then), lengths in [8, 128], padded with [PAD] to 128 every third sequence.
std::vector<int32_t> sequence(uint64_t i, int words) {
  SplitMix64 rng(SplitMix64::key(777, i));
  const auto length = static_cast<size_t>(rng.between(8, 128));
  const auto b = static_cast<size_t>(rng.between(3, static_cast<int64_t>(length) - 2));
  std::vector<int32_t> ids(length);
  for (size_t k = 0; k < length; ++k) {
    ids[k] = rng.uniform() < 0.02 ? kUnk : kFirstWord + static_cast<int32_t>(rng.below(static_cast<uint64_t>(words)));
  }
  ids.front() = kCls;
  ids[b - 1] = kSep;
  ids.back() = kSep;
  if (i % 3 == 0) ids.resize(128, kPad);
  return ids;
}

size_t candidates_of(const std::vector<int32_t>& ids) {
  return static_cast<size_t>(
      std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id != kCls && id != kSep && id != kPad; }));
}

TEST(MlmMasking, MasksAboutFifteenPercent) {
  const Vocabulary vocab = word_vocab(1000);
  const MlmMasker masker(vocab, {.max_predictions = 20});
  size_t predicted = 0, candidates = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const std::vector<int32_t> ids = sequence(i, 1000);
    const MaskedSequence m = masker.mask(ids, 0, i);
    predicted += m.predictions.size();
    candidates += candidates_of(ids);
    ASSERT_EQ(m.predictions.size(), masker.num_predictions(candidates_of(ids)));
  }
  const double share = static_cast<double>(predicted) / static_cast<double>(candidates);
  EXPECT_GT(share, 0.14);
  EXPECT_LT(share, 0.16);
}

TEST(MlmMasking, SplitsEightyTenTen) {
  const Vocabulary vocab = word_vocab(30000);  // a random token equal to the original is rare
  const MlmMasker masker(vocab, {.max_predictions = 20, .seed = 5});
  size_t masked = 0, replaced = 0, kept = 0;
  for (uint64_t i = 0; i < 2000; ++i) {
    const std::vector<int32_t> ids = sequence(i, 30000);
    const MaskedSequence m = masker.mask(ids, 3, i);
    for (const MlmPrediction& p : m.predictions) {
      const int32_t now = m.input_ids[static_cast<size_t>(p.position)];
      masked += now == kMask;
      replaced += now != kMask && now != p.label;
      kept += now == p.label;
    }
  }
  const double total = static_cast<double>(masked + replaced + kept);
  ASSERT_GT(total, 15000);
  EXPECT_NEAR(static_cast<double>(masked) / total, 0.8, 0.02);
  EXPECT_NEAR(static_cast<double>(replaced) / total, 0.1, 0.015);
  EXPECT_NEAR(static_cast<double>(kept) / total, 0.1, 0.015);
}

TEST(MlmMasking, NeverTouchesSpecialTokens) {
  const Vocabulary vocab = word_vocab(3);  // 5 specials, 3 words: random draws must skip 5 ids
  const MlmMasker masker(vocab, {.mask_prob = 1.0, .max_predictions = 512, .mask_token_prob = 0.0,
                                 .random_token_prob = 1.0});
  std::map<int32_t, size_t> drawn;
  for (uint64_t i = 0; i < 300; ++i) {
    std::vector<int32_t> ids = sequence(i, 3);
    const MaskedSequence m = masker.mask(ids, 0, i);
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] == kCls || ids[k] == kSep || ids[k] == kPad) {
        ASSERT_EQ(m.input_ids[k], ids[k]);
        ASSERT_EQ(m.labels[k], kIgnoreLabel);
      } else {
        ASSERT_EQ(m.labels[k], ids[k]) << "mask_prob 1 predicts every candidate, [UNK] included";
        ++drawn[m.input_ids[k]];
      }
    }
  }
  // Random replacements are uniform over the three words, never a special token.
  ASSERT_EQ(drawn.size(), 3u);
  const double per_word = static_cast<double>(drawn[5] + drawn[6] + drawn[7]) / 3.0;
  for (const int32_t w : {5, 6, 7}) EXPECT_NEAR(static_cast<double>(drawn[w]) / per_word, 1.0, 0.05) << w;
  EXPECT_TRUE(masker.is_special(kCls) && masker.is_special(kSep) && masker.is_special(kPad) && masker.is_special(kMask));
  EXPECT_FALSE(masker.is_special(kUnk));
}

TEST(MlmMasking, AtMostMaxPredictions) {
  const Vocabulary vocab = word_vocab(100);
  const MlmMasker masker(vocab, {.max_predictions = 5});
  for (uint64_t i = 0; i < 200; ++i) {
    const std::vector<int32_t> ids = sequence(i, 100);
    const MaskedSequence m = masker.mask(ids, 0, i);
    ASSERT_LE(m.predictions.size(), 5u);
    if (candidates_of(ids) >= 37) {
      ASSERT_EQ(m.predictions.size(), 5u);  // round(0.15 * 37) = 6 > 5
    }
  }
  // The counting rule: max(1, round(15 %)), within the candidates and the bound.
  const MlmMasker wide(vocab, {.max_predictions = 100});
  EXPECT_EQ(wide.num_predictions(0), 0u);
  EXPECT_EQ(wide.num_predictions(1), 1u);
  EXPECT_EQ(wide.num_predictions(3), 1u);
  EXPECT_EQ(wide.num_predictions(10), 2u);  // 1.5 rounds up
  EXPECT_EQ(wide.num_predictions(126), 19u);
  EXPECT_EQ(wide.num_predictions(510), 77u);
  EXPECT_EQ(default_max_predictions(128), 20);
  EXPECT_EQ(default_max_predictions(512), 77);
  // Short sequences: [CLS] w [SEP] predicts its one word; [CLS] [SEP] nothing.
  const MaskedSequence one = masker.mask(std::vector<int32_t>{kCls, 9, kSep}, 0, 0);
  ASSERT_EQ(one.predictions.size(), 1u);
  EXPECT_EQ(one.predictions[0], (MlmPrediction{1, 9}));
  EXPECT_TRUE(masker.mask(std::vector<int32_t>{kCls, kSep}, 0, 0).predictions.empty());
  EXPECT_TRUE(masker.mask(std::vector<int32_t>{}, 0, 0).predictions.empty());
}

TEST(MlmMasking, LabelsHoldTheOriginalIds) {
  const Vocabulary vocab = word_vocab(500);
  const MlmMasker masker(vocab, {.max_predictions = 20});
  for (uint64_t i = 0; i < 100; ++i) {
    const std::vector<int32_t> ids = sequence(i, 500);
    const MaskedSequence m = masker.mask(ids, 1, i);
    ASSERT_EQ(m.input_ids.size(), ids.size());
    ASSERT_EQ(m.labels.size(), ids.size());
    std::vector<bool> predicted(ids.size());
    int32_t last = -1;
    for (const MlmPrediction& p : m.predictions) {
      ASSERT_GT(p.position, last) << "ascending positions";
      last = p.position;
      ASSERT_EQ(p.label, ids[static_cast<size_t>(p.position)]);
      predicted[static_cast<size_t>(p.position)] = true;
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      ASSERT_EQ(m.labels[k], predicted[k] ? ids[k] : kIgnoreLabel) << k;
      if (!predicted[k]) {
        ASSERT_EQ(m.input_ids[k], ids[k]) << "only predicted positions change";
      }
    }
  }
}

TEST(MlmMasking, SameSeedEpochIndexSameMasksInAnyOrder) {
  const Vocabulary vocab = word_vocab(1000);
  const MlmMasker masker(vocab, {.max_predictions = 20, .seed = 11});
  std::vector<MaskedSequence> forward;
  for (uint64_t i = 0; i < 50; ++i) forward.push_back(masker.mask(sequence(i, 1000), 2, i));
  for (uint64_t r = 50; r-- > 0;) {  // the other way round, with another masker of the same options
    const MlmMasker again(vocab, masker.options());
    const MaskedSequence m = again.mask(sequence(r, 1000), 2, r);
    ASSERT_EQ(m.input_ids, forward[r].input_ids);
    ASSERT_EQ(m.predictions, forward[r].predictions);
    ASSERT_EQ(m.labels, forward[r].labels);
  }
  // Another epoch, index or seed: other masks (the chance of equal positions is negligible).
  size_t same_epoch = 0, same_index = 0, same_seed = 0;
  const MlmMasker other_seed(vocab, {.max_predictions = 20, .seed = 12});
  for (uint64_t i = 0; i < 50; ++i) {
    const std::vector<int32_t> ids = sequence(i, 1000);
    same_epoch += masker.mask(ids, 3, i).predictions == forward[i].predictions;
    same_index += masker.mask(ids, 2, i + 1000).predictions == forward[i].predictions;
    same_seed += other_seed.mask(ids, 2, i).predictions == forward[i].predictions;
  }
  EXPECT_LE(same_epoch, 2u);
  EXPECT_LE(same_index, 2u);
  EXPECT_LE(same_seed, 2u);
}

TEST(MlmMasking, MaskIntoCallerBuffersAndInPlace) {
  const Vocabulary vocab = word_vocab(1000);
  const MlmMasker masker(vocab, {.max_predictions = 20});
  const std::vector<int32_t> ids = sequence(4, 1000);
  const MaskedSequence want = masker.mask(ids, 7, 4);
  std::vector<int32_t> in_place = ids, labels(ids.size());
  std::vector<MlmPrediction> predictions;
  EXPECT_EQ(masker.mask_into(in_place, 7, 4, in_place, labels, &predictions), want.predictions.size());
  EXPECT_EQ(in_place, want.input_ids);
  EXPECT_EQ(labels, want.labels);
  EXPECT_EQ(predictions, want.predictions);
  std::vector<int32_t> out(ids.size());
  EXPECT_EQ(masker.mask_into(ids, 7, 4, out, {}), want.predictions.size());  // no labels wanted
  EXPECT_EQ(out, want.input_ids);
  std::vector<int32_t> small(ids.size() - 1);
  EXPECT_ERROR_CONTAINS(masker.mask_into(ids, 7, 4, small, {}), "the output has room for");
  EXPECT_ERROR_CONTAINS(masker.mask_into(ids, 7, 4, out, small), "the labels have room for");
}

TEST(MlmMasking, ChecksOptionsAndIds) {
  const Vocabulary vocab = word_vocab(10);
  EXPECT_ERROR_CONTAINS(MlmMasker(vocab, {.mask_prob = 0.0}), "mask_prob must be in (0, 1]");
  EXPECT_ERROR_CONTAINS(MlmMasker(vocab, {.max_predictions = 0}), "max_predictions must be at least 1");
  EXPECT_ERROR_CONTAINS(MlmMasker(vocab, {.mask_token_prob = 0.8, .random_token_prob = 0.3}),
                        "must be non-negative with a sum of at most 1");
  EXPECT_ERROR_CONTAINS(MlmMasker(vocab, {.random_token_prob = -0.1}), "must be non-negative");
  EXPECT_ERROR_CONTAINS(MlmMasker(Vocabulary({"[PAD]", "[UNK]", "w"})), "[MASK]");
  EXPECT_ERROR_CONTAINS(MlmMasker(Vocabulary({"[PAD]", "[UNK]", "[MASK]"})), "has only special tokens");
  const MlmMasker masker(vocab);
  EXPECT_ERROR_CONTAINS(masker.mask(std::vector<int32_t>{kCls, 15, kSep}, 0, 9),
                        "masked LM: sequence 9 has id 15 at position 1, outside the vocabulary of 15 tokens");
  EXPECT_ERROR_CONTAINS(masker.mask(std::vector<int32_t>{-1}, 0, 0), "has id -1");
}

}  // namespace
}  // namespace dp::text
