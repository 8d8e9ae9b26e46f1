// The dataset seam of the data pipeline: a Dataset knows its samples and writes any subset of
// them into batch buffers allocated once and reused. Samplers (sampler.h) choose the indices and
// the DataLoader (loader.h) runs the filling on background threads.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp {

// Names of the tensors an image-classification batch holds (sequence models add their own).
inline constexpr const char* kImages = "images";  // float32 [B, C, H, W], or uint8 [B, H, W, C] (model_input)
inline constexpr const char* kLabels = "labels";  // int64 [B]

// One batch of samples as named tensors, kept in the order they were added; the leading
// dimension of every tensor is the batch. The loader, the uploader and the trainer handle a batch
// by its tensors, whatever their names: a model's input and target are the only places that
// read particular names.
class Batch {
 public:
  Batch() = default;
  Batch(std::initializer_list<std::pair<std::string, Tensor>> tensors);

  // Adds `name`, or replaces the tensor of that name in its place.
  void set(const std::string& name, Tensor tensor);
  bool contains(const std::string& name) const;
  // The tensor called `name`; a dp::Error naming the tensors the batch does hold otherwise.
  const Tensor& operator[](const std::string& name) const;
  Tensor& operator[](const std::string& name);
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }
  std::vector<std::pair<std::string, Tensor>>& tensors() { return tensors_; }

  // Samples in the batch: the leading dimension (0 for a batch without tensors).
  int64_t size() const { return tensors_.empty() ? 0 : tensors_.front().second.size(0); }
  // The first n samples of every tensor, as views (no copy).
  Batch prefix(int64_t n) const;
  // Samples [start, start + n) of every tensor, as views (no copy).
  Batch slice(int64_t start, int64_t n) const;
  // Bumps the tensors' version counters after the buffers were rewritten, so that a tensor
  // saved for backward from an earlier batch in the same buffers is reported as stale.
  void mark_rewritten() const;
  // "images uint8 [4, 32, 32, 3], labels int64 [4]", for messages.
  std::string str() const;

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

// One batch of rows (token batching, runtime/data/token_batching.h): its samples are sequences,
// grouped into rows that are padded to one length; a row may hold several sequences (packing).
struct RowBatch {
  std::span<const int64_t> samples;  // the sequences, row after row
  std::span<const int64_t> row_starts;  // row r holds samples[row_starts[r] - row_starts[0], row_starts[r + 1] - row_starts[0])
  int64_t padded_length = 0;         // every row's length in the batch tensors
  // Targets (e.g. predicted tokens) of the whole step over all ranks, for a loss normalised by
  // their global count whatever the split; 0 when the plan does not count them.
  int64_t step_targets = 0;

  int64_t rows() const { return row_starts.empty() ? 0 : static_cast<int64_t>(row_starts.size()) - 1; }
  // Row r's samples.
  std::span<const int64_t> row(int64_t r) const {
    return samples.subspan(static_cast<size_t>(row_starts[r] - row_starts[0]),
                           static_cast<size_t>(row_starts[r + 1] - row_starts[r]));
  }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Names the data in messages ("Fashion-MNIST train split in /usr/share/...").
  virtual const std::string& description() const = 0;
  // Bytes one sample (one row for datasets of rows) takes in a batch buffer (memory planning).
  virtual int64_t sample_bytes() const = 0;
  // Buffers for up to `capacity` samples on `device` (a CPU device), allocated once by the loader.
  virtual Batch allocate_batch(int64_t capacity, Device device) const = 0;
  // Writes samples indices[0, B) into `out`, whose tensors have leading dimension B. `epoch`
  // (0-based) seeds random augmentation together with the run's seed and each sample's index,
  // so a sample looks the same whichever thread or rank loads it.
  // Called concurrently from loader threads on distinct buffers: must only read the dataset
  // (counters of skipped files excepted, which are atomic).
  virtual void fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const = 0;
  // Datasets of sequences batched by tokens (a BatchSampler whose plan has rows): writes `batch`
  // into the beginning of `buffers` (from allocate_batch, capacity >= its rows) and returns the
  // views that hold it, shaped by the batch ([rows, padded_length], ...). The same threading
  // rules as fill_batch. The default throws: fixed-shape samples have no rows.
  virtual Batch fill_rows(const RowBatch& batch, int64_t epoch, const Batch& buffers) const;
  // A digest of what this dataset holds, compared across ranks before training (a node whose copy
  // of the data is partial or different would otherwise train the model on it without a word):
  // in-memory data hashes its samples and labels; file-backed data its file list, labels and
  // sequence lengths, not the files' bytes. The default: the size alone.
  virtual uint64_t content_digest() const;
};

// Samples of images with one class each: what the trainer needs beyond Dataset.
class ClassificationDataset : public Dataset {
 public:
  virtual int64_t num_classes() const = 0;
  // Each label's name, in label order (an image folder's class folders, Fashion-MNIST's
  // categories); empty where labels are only numbers. Weights files record them, so weights are
  // never evaluated against another label order (launch/evaluate_command.h).
  virtual std::vector<std::string> class_names() const { return {}; }
  // The model's input per sample, [C, H, W].
  virtual Shape input_shape() const = 0;
  // The model's float32 [B, C, H, W] input in `format` (NOTE [ Channels-last ]) from a batch's
  // `images` on the training device: the images themselves where the dataset normalised while
  // loading, else a cast and normalisation run on the device (the batch crossed to it as uint8, a
  // quarter of the bytes).
  virtual Tensor model_input(const Tensor& images, MemoryFormat format = MemoryFormat::Contiguous) const {
    return images.contiguous(format);
  }
};

// Applied to pixels scaled to [0, 1]: (x / 255 - mean) / std.
struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};

// uint8 images and integer class labels held in memory; batches are normalised float32.
class ImageClassificationDataset : public ClassificationDataset {
 public:
  // pixels: N images of image_shape {C, H, W}, row-major; labels: N values in [0, num_classes).
  // `description` names the data in error messages (e.g. "Fashion-MNIST train split in /path").
  ImageClassificationDataset(std::vector<uint8_t> pixels, Shape image_shape, std::vector<int64_t> labels,
                             int64_t num_classes, Normalization normalization, std::string description);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Batch allocate_batch(int64_t capacity, Device device) const override;
  // out.images float32 [B, C, H, W] contiguous, out.labels int64 [B] contiguous (no augmentation:
  // the epoch is not used).
  void fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const override;

  const Shape& image_shape() const { return image_shape_; }
  Shape input_shape() const override { return image_shape_; }
  int64_t sample_bytes() const override { return image_numel_ * 4 + 8; }
  int64_t num_classes() const override { return num_classes_; }
  const Normalization& normalization() const { return normalization_; }
  const std::string& description() const override { return description_; }
  uint64_t content_digest() const override;  // pixels, labels, shape, classes
  std::span<const uint8_t> image(int64_t index) const;  // C*H*W raw pixels
  int64_t label(int64_t index) const;
  std::span<const int64_t> labels() const { return labels_; }
  // The float32 value a pixel byte becomes in a batch.
  float normalized(uint8_t pixel) const { return pixel_table_[pixel]; }

 private:
  void check_index(int64_t index) const;

  std::vector<uint8_t> pixels_;
  Shape image_shape_;
  int64_t image_numel_;
  std::vector<int64_t> labels_;
  int64_t num_classes_;
  Normalization normalization_;
  std::string description_;
  std::array<float, 256> pixel_table_;  // normalised value of every byte: one load per pixel
};

}  // namespace dp
