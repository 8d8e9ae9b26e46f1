// Masked-LM batches of rows (runtime/text/mlm_dataset.h): the layout of packed and padded rows,
// the gathered prediction slots and their weights, masks that depend only on (seed, epoch,
// sequence), and the token-batching sampler's global prediction counts through a real DataLoader.
#include "runtime/text/mlm_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "common/scratch_dir.h"
#include "runtime/core/runtime.h"
#include "runtime/data/loader.h"
#include "runtime/data/token_batching.h"

namespace dp::text {
namespace {

// The sequences in a loaded batch of rows: the most sequence id of each row, summed.
int64_t sequences_in_batch(const Batch& batch) {
  const std::vector<int64_t> ids = batch[kSequenceIds].to_vector<int64_t>();
  const int64_t rows = batch[kSequenceIds].size(0), width = batch[kSequenceIds].size(1);
  int64_t total = 0;
  for (int64_t r = 0; r < rows; ++r) total += *std::max_element(ids.begin() + r * width, ids.begin() + (r + 1) * width);
  return total;
}

class MlmDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int k = 0; k < 200; ++k) tokens.push_back("w" + std::to_string(k));
    vocab_ = std::make_shared<const Vocabulary>(std::move(tokens));
    // 60 sequences [CLS] A [SEP] B [SEP] of 5..40 tokens.
    Sequences sequences;
    SplitMix64 rng(SplitMix64::key(3));
    for (int i = 0; i < 60; ++i) {
      std::vector<int32_t> a(static_cast<size_t>(rng.between(1, 20))), b(static_cast<size_t>(rng.between(1, 17)));
      for (int32_t& id : a) id = 5 + static_cast<int32_t>(rng.below(200));
      for (int32_t& id : b) id = 5 + static_cast<int32_t>(rng.below(200));
      sequences.append(a, b, vocab_->cls_id(), vocab_->sep_id());
    }
    TextShardProvenance provenance;
    provenance.sequence_options.max_seq_length = 48;
    write_text_shard((scratch_.path() / "shard").string(), sequences, *vocab_, provenance);
  }

  MlmDataset open(bool training) const {
    return MlmDataset(TextDataset::open((scratch_.path() / "shard").string(), *vocab_), vocab_,
                      {.max_predictions = 6, .seed = 11}, training, "test text");
  }

  dp::testing::ScratchDir scratch_{"mlm_dataset"};
  std::shared_ptr<const Vocabulary> vocab_;
  Runtime runtime_;
};

TEST_F(MlmDatasetTest, PackedRowsHoldEachSequenceMaskedInPlaceWithItsPredictionsGathered) {
  const MlmDataset data = open(/*training=*/true);
  const Device cpu = runtime_.cpu();
  const Batch buffers = data.allocate_batch(4, cpu);
  // Row 0 packs two sequences that fit a 48-token row together, row 1 holds sequence 1 alone.
  const int64_t width = 48;
  std::vector<int64_t> samples;
  for (int64_t i = 2; i < data.size() && samples.size() < 2; ++i)
    if (data.text().length(static_cast<size_t>(i)) <= 24) samples.push_back(i);
  ASSERT_EQ(samples.size(), 2u);
  samples.push_back(1);
  const std::vector<int64_t> row_starts = {0, 2, 3};
  RowBatch request{samples, row_starts, width, /*step_targets=*/50};
  const Batch batch = data.fill_rows(request, /*epoch=*/2, buffers);
  ASSERT_EQ(batch[kInputIds].shape(), (Shape{2, width}));
  const auto ids = batch[kInputIds].to_vector<int64_t>(), types = batch[kTokenTypeIds].to_vector<int64_t>();
  const auto positions = batch[kPositionIds].to_vector<int64_t>(), seq = batch[kSequenceIds].to_vector<int64_t>();
  const int64_t slots = batch[kMlmPositions].size(1);
  const auto mlm_positions = batch[kMlmPositions].to_vector<int64_t>();
  const auto mlm_labels = batch[kMlmLabels].to_vector<int64_t>();
  const auto mlm_weights = batch[kMlmWeights].to_vector<float>();
  int64_t most = 0;
  for (int64_t r = 0; r < 2; ++r) {
    int64_t offset = 0, k = 0, used = 0;
    for (int64_t s = row_starts[r]; s < row_starts[r + 1]; ++s) {
      const auto index = static_cast<uint64_t>(samples[s]);
      const std::vector<int32_t> original = data.text().tokens(index).to_vector();
      // The same masks as masking the sequence alone, for (seed, epoch, index).
      const MaskedSequence expected = data.masker().mask(original, 2, index);
      ++k;
      for (size_t t = 0; t < original.size(); ++t) {
        const int64_t at = r * width + offset + static_cast<int64_t>(t);
        EXPECT_EQ(ids[at], expected.input_ids[t]) << "row " << r << " token " << offset + t;
        EXPECT_EQ(types[at], static_cast<int64_t>(t) >= data.text().segment_b_start(index) ? 1 : 0);
        EXPECT_EQ(positions[at], static_cast<int64_t>(t));
        EXPECT_EQ(seq[at], k);
      }
      for (const MlmPrediction& p : expected.predictions) {
        ASSERT_LT(used, slots);
        EXPECT_EQ(mlm_positions[r * slots + used], r * width + offset + p.position);
        EXPECT_EQ(mlm_labels[r * slots + used], p.label);
        EXPECT_FLOAT_EQ(mlm_weights[r * slots + used], 1.0f / 50.0f);  // the step's mean over all ranks
        ++used;
      }
      EXPECT_EQ(static_cast<int64_t>(expected.predictions.size()), data.targets()[index]);
      offset += static_cast<int64_t>(original.size());
    }
    for (int64_t t = offset; t < width; ++t) {  // padding
      EXPECT_EQ(ids[r * width + t], vocab_->pad_id());
      EXPECT_EQ(seq[r * width + t], 0);
    }
    for (int64_t p = used; p < slots; ++p) {  // unused slots point at the row's first token, weight 0
      EXPECT_EQ(mlm_positions[r * slots + p], r * width);
      EXPECT_EQ(mlm_labels[r * slots + p], kIgnoreLabel);
      EXPECT_EQ(mlm_weights[r * slots + p], 0.0f);
    }
    most = std::max(most, used);
  }
  EXPECT_EQ(slots, most) << "the batch's slots per row are its most predictions in a row";

  // Evaluation batches weigh every prediction 1 (the objective sums them).
  const MlmDataset eval = open(/*training=*/false);
  const Batch e = eval.fill_rows(request, 0, eval.allocate_batch(4, cpu));
  for (const float w : e[kMlmWeights].to_vector<float>()) EXPECT_TRUE(w == 0.0f || w == 1.0f);
  EXPECT_ERROR_CONTAINS(data.fill_batch(samples, 0, buffers), "test text in " + (scratch_.path() / "shard").string() +
                                                                  ": masked-LM data is batched by tokens");
}

TEST_F(MlmDatasetTest, TheLoaderDealsEverySequenceOnceAndEachRankKnowsTheStepsPredictions) {
  const MlmDataset data = open(true);
  const std::vector<int32_t> lengths(data.lengths().begin(), data.lengths().end());
  for (const bool packed : {false, true}) {
    TokenBatchingOptions o;
    o.batching = TokenBatching::MaxTokens;
    o.max_tokens = 256;
    o.max_seq_length = 48;
    o.world_size = 2;
    o.seed = 5;
    o.packing = packed ? SequencePacking::Greedy : SequencePacking::None;
    const TokenEpochPlan plan = plan_token_epoch(lengths, o, 1);
    std::map<int64_t, int> seen;
    std::vector<int64_t> predicted_per_step(plan.steps.size(), 0);
    for (int rank = 0; rank < 2; ++rank) {
      DataLoader loader(data, std::make_unique<TokenBatchSampler>(lengths, data.targets(), o, rank), runtime_.cpu(),
                        {.num_threads = 1, .prefetch = 2, .host_allocator = {}});
      loader.begin_epoch(1);
      ASSERT_EQ(loader.num_batches(), static_cast<int64_t>(plan.steps.size()));
      int64_t step = 0;
      while (std::optional<LoadedBatch> batch = loader.next()) {
        const RankBatch& planned = plan.steps[step].ranks[rank];
        EXPECT_EQ((*batch)[kInputIds].shape(), (Shape{planned.num_rows(), planned.padded_length}));
        EXPECT_EQ(sequences_in_batch(*batch), static_cast<int64_t>(planned.sequences.size()));
        EXPECT_EQ(batch->samples(), static_cast<int64_t>(planned.sequences.size()));
        for (const int64_t s : planned.sequences) ++seen[s];
        // Each weight is 1 / the step's predictions over both ranks.
        int64_t step_predictions = 0, step_sequences = 0;
        for (const RankBatch& b : plan.steps[step].ranks) {
          step_sequences += static_cast<int64_t>(b.sequences.size());
          for (const int64_t s : b.sequences) step_predictions += data.targets()[s];
        }
        EXPECT_EQ(batch->step_samples(), step_sequences) << "the step's sequences on both ranks";
        int64_t mine = 0;
        for (const float w : (*batch)[kMlmWeights].to_vector<float>()) {
          if (w == 0.0f) continue;
          EXPECT_FLOAT_EQ(w, 1.0f / static_cast<float>(step_predictions));
          ++mine;
        }
        predicted_per_step[step] += mine;
        ++step;
      }
      EXPECT_EQ(step, static_cast<int64_t>(plan.steps.size()));
    }
    for (size_t step = 0; step < plan.steps.size(); ++step) {
      int64_t expected = 0;
      for (const RankBatch& b : plan.steps[step].ranks)
        for (const int64_t s : b.sequences) expected += data.targets()[s];
      EXPECT_EQ(predicted_per_step[step], expected) << "step " << step << (packed ? " (packed)" : "");
    }
    EXPECT_EQ(seen.size(), data.lengths().size()) << "every sequence trained" << (packed ? " (packed)" : "");
  }
}

TEST_F(MlmDatasetTest, EvaluationVisitsEachSequenceOnceSplitOverTheRanks) {
  const MlmDataset data = open(false);
  TokenBatchingOptions o;
  o.batching = TokenBatching::MaxTokens;
  o.max_tokens = 200;
  o.max_seq_length = 48;
  std::vector<int> visits(data.lengths().size(), 0);
  for (int rank = 0; rank < 3; ++rank) {
    const auto sampler = TokenBatchSampler::for_evaluation(data.lengths(), o, rank, 3);
    const EpochPlan plan = sampler->plan(0);
    for (const int64_t s : plan.indices) ++visits[static_cast<size_t>(s)];
  }
  EXPECT_TRUE(std::all_of(visits.begin(), visits.end(), [](int v) { return v == 1; }));
}

}  // namespace
}  // namespace dp::text
