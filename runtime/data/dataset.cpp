#include "runtime/data/dataset.h"

#include <cmath>

namespace dp {

Batch Batch::prefix(int64_t n) const { return Batch{images.narrow(0, 0, n), labels.narrow(0, 0, n)}; }

void Batch::mark_rewritten() const {
  images.bump_version();
  labels.bump_version();
}

ImageClassificationDataset::ImageClassificationDataset(std::vector<uint8_t> pixels, Shape image_shape,
                                                       std::vector<int64_t> labels, int64_t num_classes,
                                                       Normalization normalization, std::string description)
    : pixels_(std::move(pixels)),
      image_shape_(std::move(image_shape)),
      image_numel_(numel_of(image_shape_)),
      labels_(std::move(labels)),
      num_classes_(num_classes),
      normalization_(normalization),
      description_(std::move(description)) {
  DP_CHECK(image_shape_.size() == 3 && image_numel_ > 0, description_, ": image shape must be [C, H, W], got ",
           shape_str(image_shape_));
  DP_CHECK(static_cast<int64_t>(pixels_.size()) == size() * image_numel_, description_, ": ", pixels_.size(),
           " pixel bytes do not hold ", size(), " images of shape ", shape_str(image_shape_));
  DP_CHECK(num_classes_ > 0, description_, ": num_classes must be positive, got ", num_classes_);
  for (int64_t i = 0; i < size(); ++i) {
    DP_CHECK(labels_[i] >= 0 && labels_[i] < num_classes_, description_, ": label ", labels_[i], " of sample ", i,
             " is outside [0, ", num_classes_, "); the labels file is corrupt or not for this data set");
  }
  DP_CHECK(std::isfinite(normalization_.mean) && normalization_.std > 0 && std::isfinite(normalization_.std),
           description_, ": normalisation needs a finite mean and a positive std, got mean ", normalization_.mean,
           ", std ", normalization_.std);
  for (int v = 0; v < 256; ++v) {
    pixel_table_[v] = static_cast<float>((v / 255.0 - normalization_.mean) / normalization_.std);
  }
}

void ImageClassificationDataset::check_index(int64_t index) const {
  DP_CHECK(index >= 0 && index < size(), description_, ": sample index ", index, " is outside [0, ", size(), ")");
}

std::span<const uint8_t> ImageClassificationDataset::image(int64_t index) const {
  check_index(index);
  return std::span<const uint8_t>(pixels_).subspan(index * image_numel_, image_numel_);
}

int64_t ImageClassificationDataset::label(int64_t index) const {
  check_index(index);
  return labels_[index];
}

Batch ImageClassificationDataset::allocate_batch(int64_t capacity, Device device) const {
  Shape images_shape{capacity};
  images_shape.insert(images_shape.end(), image_shape_.begin(), image_shape_.end());
  return Batch{Tensor::empty(images_shape, kFloat32, device), Tensor::empty({capacity}, kInt64, device)};
}

void ImageClassificationDataset::fill_batch(std::span<const int64_t> indices, int64_t /*epoch*/,
                                            const Batch& out) const {
  // out.images float32 [B, C, H, W], out.labels int64 [B]
  const int64_t batch = static_cast<int64_t>(indices.size());
  Shape images_shape{batch};
  images_shape.insert(images_shape.end(), image_shape_.begin(), image_shape_.end());
  DP_CHECK(out.images.device().is_cpu() && out.images.dtype() == kFloat32 && out.images.shape() == images_shape &&
               out.images.is_contiguous(),
           description_, ": fill_batch needs contiguous float32 images ", shape_str(images_shape), " on the CPU, got ",
           out.images.str());
  DP_CHECK(out.labels.device().is_cpu() && out.labels.dtype() == kInt64 && out.labels.shape() == Shape{batch} &&
               out.labels.is_contiguous(),
           description_, ": fill_batch needs contiguous int64 labels [", batch, "] on the CPU, got ", out.labels.str());
  float* images = out.images.data<float>();
  int64_t* labels = out.labels.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t index = indices[b];
    check_index(index);
    const uint8_t* src = pixels_.data() + index * image_numel_;
    float* dst = images + b * image_numel_;
    for (int64_t p = 0; p < image_numel_; ++p) dst[p] = pixel_table_[src[p]];
    labels[b] = labels_[index];
  }
}

}  // namespace dp
