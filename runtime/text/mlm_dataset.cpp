#include "runtime/text/mlm_dataset.h"

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp::text {

namespace {

// The first rows x width elements of a [capacity, max] buffer as a contiguous [rows, width] view.
Tensor leading_view(const Tensor& buffer, int64_t rows, int64_t width) {
  return buffer.flatten().narrow(0, 0, rows * width).view({rows, width});
}

}  // namespace

MlmDataset::MlmDataset(TextDataset data, std::shared_ptr<const Vocabulary> vocab, const MlmMaskingOptions& masking,
                       bool training, const std::string& name)
    : vocab_(std::move(vocab)),
      data_(std::move(data)),
      masker_(*vocab_, masking),
      training_(training),
      description_(name + " in " + data_.path()) {
  targets_.resize(data_.size());
  std::vector<int32_t> ids;
  Fnv1a digest;
  digest.word(data_.size()).word(vocab_->size());
  for (size_t i = 0; i < data_.size(); ++i) {
    ids.resize(data_.length(i));
    data_.tokens(i).copy_to(ids);
    targets_[i] = static_cast<int32_t>(masker_.predictions_in(ids));
    total_targets_ += targets_[i];
    digest.words(ids.data(), ids.size() * sizeof(int32_t));  // with its length: sequence boundaries count
  }
  content_digest_ = digest.value();
}

int64_t MlmDataset::sample_bytes() const {
  // Four int64 token tensors and the three prediction tensors, every one max_seq_length wide.
  return static_cast<int64_t>(max_seq_length()) * (4 * 8 + 8 + 8 + 4);
}

Batch MlmDataset::allocate_batch(int64_t capacity, Device device) const {
  const int64_t width = max_seq_length();
  return Batch{{kInputIds, Tensor::empty({capacity, width}, kInt64, device)},
               {kTokenTypeIds, Tensor::empty({capacity, width}, kInt64, device)},
               {kPositionIds, Tensor::empty({capacity, width}, kInt64, device)},
               {kSequenceIds, Tensor::empty({capacity, width}, kInt64, device)},
               {kMlmPositions, Tensor::empty({capacity, width}, kInt64, device)},
               {kMlmLabels, Tensor::empty({capacity, width}, kInt64, device)},
               {kMlmWeights, Tensor::empty({capacity, width}, kFloat32, device)}};
}

void MlmDataset::fill_batch(std::span<const int64_t>, int64_t, const Batch&) const {
  throw Error(dp::detail::concat(description_, ": masked-LM data is batched by tokens (rows of sequences), not by ",
                             "samples; load it with a token-batching plan (data.batching)"));
}

Batch MlmDataset::fill_rows(const RowBatch& batch, int64_t epoch, const Batch& buffers) const {
  const int64_t rows = batch.rows(), width = batch.padded_length;
  const int64_t capacity = buffers[kInputIds].size(0), max_width = buffers[kInputIds].size(1);
  DP_CHECK(rows >= 1 && rows <= capacity, description_, ": a batch of ", rows, " rows does not fit buffers of ",
           capacity);
  DP_CHECK(width >= 1 && width <= max_width, description_, ": padded length ", width, " is outside [1, ",
           max_width, "]");
  Batch out{{kInputIds, leading_view(buffers[kInputIds], rows, width)},
            {kTokenTypeIds, leading_view(buffers[kTokenTypeIds], rows, width)},
            {kPositionIds, leading_view(buffers[kPositionIds], rows, width)},
            {kSequenceIds, leading_view(buffers[kSequenceIds], rows, width)}};
  int64_t* input_ids = out[kInputIds].data<int64_t>();
  int64_t* token_types = out[kTokenTypeIds].data<int64_t>();
  int64_t* positions = out[kPositionIds].data<int64_t>();
  int64_t* sequence_ids = out[kSequenceIds].data<int64_t>();
  std::fill(input_ids, input_ids + rows * width, static_cast<int64_t>(vocab_->pad_id()));
  std::fill(token_types, token_types + rows * width, 0);
  std::fill(positions, positions + rows * width, 0);
  std::fill(sequence_ids, sequence_ids + rows * width, 0);

  std::vector<int32_t> ids, masked;
  std::vector<MlmPrediction> predictions;          // the batch's, row after row
  std::vector<size_t> row_predictions{0};          // row r: predictions[row_predictions[r], [r + 1])
  predictions.reserve(static_cast<size_t>(rows) * static_cast<size_t>(masker_.options().max_predictions));
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0, k = 0;
    for (const int64_t sequence : batch.row(r)) {
      const auto s = static_cast<size_t>(sequence);
      const auto length = static_cast<int64_t>(data_.length(s));  // throws for an index outside the data
      DP_CHECK(offset + length <= width, description_, ": row ", r, "'s sequences have more than its padded length ",
               width, " tokens");
      ids.resize(static_cast<size_t>(length));
      masked.resize(static_cast<size_t>(length));
      data_.tokens(s).copy_to(ids);
      const size_t first = predictions.size();
      masker_.mask_into(ids, static_cast<uint64_t>(epoch), static_cast<uint64_t>(sequence), masked, {}, &predictions);
      for (size_t p = first; p < predictions.size(); ++p) predictions[p].position += static_cast<int32_t>(offset);
      const int64_t b_start = data_.segment_b_start(s);
      const int64_t base = r * width + offset;
      ++k;
      for (int64_t t = 0; t < length; ++t) {
        input_ids[base + t] = masked[static_cast<size_t>(t)];
        token_types[base + t] = t >= b_start ? 1 : 0;
        positions[base + t] = t;
        sequence_ids[base + t] = k;
      }
      offset += length;
    }
    row_predictions.push_back(predictions.size());
  }

  int64_t slots = 1;
  for (int64_t r = 0; r < rows; ++r)
    slots = std::max<int64_t>(slots, static_cast<int64_t>(row_predictions[r + 1] - row_predictions[r]));
  out.set(kMlmPositions, leading_view(buffers[kMlmPositions], rows, slots));
  out.set(kMlmLabels, leading_view(buffers[kMlmLabels], rows, slots));
  out.set(kMlmWeights, leading_view(buffers[kMlmWeights], rows, slots));
  int64_t* mlm_positions = out[kMlmPositions].data<int64_t>();
  int64_t* mlm_labels = out[kMlmLabels].data<int64_t>();
  float* mlm_weights = out[kMlmWeights].data<float>();
  // Training: the step's mean over every rank's predicted tokens (NOTE [ MLM batches ]).
  const float weight = training_ && batch.step_targets > 0 ? 1.0f / static_cast<float>(batch.step_targets) : 1.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t begin = row_predictions[r], count = row_predictions[r + 1] - begin;
    for (int64_t p = 0; p < slots; ++p) {
      const int64_t at = r * slots + p;
      const bool used = static_cast<size_t>(p) < count;
      mlm_positions[at] = r * width + (used ? predictions[begin + p].position : 0);
      mlm_labels[at] = used ? predictions[begin + p].label : kIgnoreLabel;
      mlm_weights[at] = used ? weight : 0.0f;
    }
  }
  return out;
}

}  // namespace dp::text
