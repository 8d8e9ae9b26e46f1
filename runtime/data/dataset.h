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

// One batch of samples; the leading dimension of every tensor is the batch.
struct Batch {
  Tensor images;  // float32 [B, C, H, W]
  Tensor labels;  // int64 [B]

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // The first n samples of every tensor, as views (no copy).
  Batch prefix(int64_t n) const;
  // Bumps the tensors' version counters after the buffers were rewritten, so that a tensor
  // saved for backward from an earlier batch in the same buffers is reported as stale.
  void mark_rewritten() const;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Buffers for up to `capacity` samples on `device` (a CPU device), allocated once by the loader.
  virtual Batch allocate_batch(int64_t capacity, Device device) const = 0;
  // Writes samples indices[0, B) into `out`, whose tensors have leading dimension B.
  // Called concurrently from loader threads on distinct buffers: must only read the dataset.
  virtual void fill_batch(std::span<const int64_t> indices, const Batch& out) const = 0;
};

// Applied to pixels scaled to [0, 1]: (x / 255 - mean) / std.
struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};

// uint8 images and integer class labels held in memory; batches are normalised float32.
class ImageClassificationDataset : public Dataset {
 public:
  // pixels: N images of image_shape {C, H, W}, row-major; labels: N values in [0, num_classes).
  // `description` names the data in error messages (e.g. "Fashion-MNIST train split in /path").
  ImageClassificationDataset(std::vector<uint8_t> pixels, Shape image_shape, std::vector<int64_t> labels,
                             int64_t num_classes, Normalization normalization, std::string description);

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Batch allocate_batch(int64_t capacity, Device device) const override;
  // out.images float32 [B, C, H, W] contiguous, out.labels int64 [B] contiguous.
  void fill_batch(std::span<const int64_t> indices, const Batch& out) const override;

  const Shape& image_shape() const { return image_shape_; }
  int64_t num_classes() const { return num_classes_; }
  const Normalization& normalization() const { return normalization_; }
  const std::string& description() const { return description_; }
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
