#include "runtime/data/dataset.h"

#include <cmath>

#include "runtime/core/hash.h"

namespace dp {

Batch::Batch(std::initializer_list<std::pair<std::string, Tensor>> tensors) {
  for (const auto& [name, tensor] : tensors) set(name, tensor);
}

void Batch::set(const std::string& name, Tensor tensor) {
  DP_CHECK(tensor.defined() && tensor.dim() >= 1, "batch tensor '", name,
           "' must have a leading batch dimension, got ", tensor.defined() ? tensor.str() : std::string("undefined"));
  for (auto& [n, t] : tensors_)
    if (n == name) {
      t = std::move(tensor);
      return;
    }
  tensors_.emplace_back(name, std::move(tensor));
}

bool Batch::contains(const std::string& name) const {
  for (const auto& entry : tensors_)
    if (entry.first == name) return true;
  return false;
}

const Tensor& Batch::operator[](const std::string& name) const {
  for (const auto& [n, t] : tensors_)
    if (n == name) return t;
  throw Error(detail::concat("batch has no tensor '", name, "' (it holds: ", tensors_.empty() ? "nothing" : str(), ")"));
}

Tensor& Batch::operator[](const std::string& name) {
  return const_cast<Tensor&>(static_cast<const Batch&>(*this)[name]);
}

uint64_t Dataset::content_digest() const { return Fnv1a().word(static_cast<uint64_t>(size())).value(); }

Batch Dataset::fill_rows(const RowBatch& batch, int64_t, const Batch&) const {
  throw Error(detail::concat(description(), ": this dataset holds fixed-shape samples and cannot fill a batch of ",
                             batch.rows(), " rows (token batching is for sequence datasets)"));
}

Batch Batch::prefix(int64_t n) const { return slice(0, n); }

Batch Batch::slice(int64_t start, int64_t n) const {
  Batch out;
  for (const auto& [name, t] : tensors_) out.tensors_.emplace_back(name, t.narrow(0, start, n));
  return out;
}

void Batch::mark_rewritten() const {
  for (const auto& entry : tensors_) entry.second.bump_version();
}

std::string Batch::str() const {
  std::string out;
  for (const auto& [name, t] : tensors_) out += (out.empty() ? "" : ", ") + name + " " + t.str();
  return out;
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

uint64_t ImageClassificationDataset::content_digest() const {
  Fnv1a digest;
  digest.word(static_cast<uint64_t>(size())).word(static_cast<uint64_t>(num_classes_));
  for (int64_t d : image_shape_) digest.word(static_cast<uint64_t>(d));
  digest.words(pixels_.data(), pixels_.size());
  return digest.words(labels_.data(), labels_.size() * sizeof(int64_t)).value();
}

int64_t ImageClassificationDataset::label(int64_t index) const {
  check_index(index);
  return labels_[index];
}

Batch ImageClassificationDataset::allocate_batch(int64_t capacity, Device device) const {
  Shape images_shape{capacity};
  images_shape.insert(images_shape.end(), image_shape_.begin(), image_shape_.end());
  return Batch{{kImages, Tensor::empty(images_shape, kFloat32, device)}, {kLabels, Tensor::empty({capacity}, kInt64, device)}};
}

void ImageClassificationDataset::fill_batch(std::span<const int64_t> indices, int64_t /*epoch*/,
                                            const Batch& out) const {
  const Tensor& out_images = out[kImages];
  const Tensor& out_labels = out[kLabels];
  // out.images float32 [B, C, H, W], out.labels int64 [B]
  const int64_t batch = static_cast<int64_t>(indices.size());
  Shape images_shape{batch};
  images_shape.insert(images_shape.end(), image_shape_.begin(), image_shape_.end());
  DP_CHECK(out_images.device().is_cpu() && out_images.dtype() == kFloat32 && out_images.shape() == images_shape &&
               out_images.is_contiguous(),
           description_, ": fill_batch needs contiguous float32 images ", shape_str(images_shape), " on the CPU, got ",
           out_images.str());
  DP_CHECK(out_labels.device().is_cpu() && out_labels.dtype() == kInt64 && out_labels.shape() == Shape{batch} &&
               out_labels.is_contiguous(),
           description_, ": fill_batch needs contiguous int64 labels [", batch, "] on the CPU, got ", out_labels.str());
  float* images = out_images.data<float>();
  int64_t* labels = out_labels.data<int64_t>();
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
