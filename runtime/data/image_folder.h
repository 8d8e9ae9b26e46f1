// Datasets of RGB images that reach the model as uint8 batches normalised on the device:
//   ImageFolder      — ImageNet's layout on disk, <split>/<class>/**/*.JPEG, as torchvision's
//                      ImageFolder reads it (class index = position of the folder name in sorted
//                      order), decoded with libjpeg-turbo and transformed like torchvision.
//   SyntheticImages  — random pixels made on the fly, for benchmarks that must not read disks.
//
// NOTE [ Image pipeline ]
// A loader thread turns one sample into crop_size x crop_size x 3 bytes of its batch slot:
//   read the file → decode (at M/8 of full size when the crop is shrunk anyway: DCT-domain
//   downscaling, jpeg.h) → crop + resize with PIL's antialiased bilinear filter → flip.
// Train: RandomResizedCrop(crop_size, scale, ratio) + RandomHorizontalFlip(0.5), drawn from
// SampleRng(seed, epoch, index) so a sample's augmentation depends on nothing else (the same on
// one rank or many). Eval: Resize(eval_resize_size) + CenterCrop(eval_crop_size), done as one
// resample of the crop's preimage, which equals resize-then-crop pixel for pixel.
// The batch holds uint8 [B, H, W, 3] (HWC, as decoders write it). On the training device
// model_input() casts to float32, normalises per channel ((x / 255 - mean) / std) and returns
// [B, 3, H, W]: the host→device copy moves a quarter of float32's bytes and the host does no
// arithmetic per pixel beyond decoding and resizing.
// Bad files (truncated, not a JPEG, unreadable) throw naming the file; with skip_bad_files the
// sample is replaced by the next readable one in file order and the file is counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/image_transforms.h"

namespace dp {

struct ImageTransformOptions {
  bool train = true;                  // random-resized crop + flip, else resize + centre crop
  int crop_size = 224;                // train output side
  RandomResizedCropOptions crop;      // train
  bool horizontal_flip = true;        // train
  int eval_resize_size = 256;         // eval: shorter side before the centre crop
  int eval_crop_size = 224;           // eval output side
  bool dct_scaling = true;            // decode JPEGs at a reduced scale where the crop allows
  uint64_t seed = 0;                  // augmentation: SampleRng(seed, epoch, index)
  std::vector<double> mean = {0.485, 0.456, 0.406};  // per channel, on x / 255 (ImageNet's)
  std::vector<double> std = {0.229, 0.224, 0.225};

  int output_size() const { return train ? crop_size : eval_crop_size; }
};

// The common half of uint8 RGB datasets: batch buffers and the normalisation on the device.
class RgbImageDataset : public ClassificationDataset {
 public:
  explicit RgbImageDataset(ImageTransformOptions transform);
  // images uint8 [capacity, S, S, 3], labels int64 [capacity], S = transform.output_size().
  Batch allocate_batch(int64_t capacity, Device device) const override;
  Shape input_shape() const override;
  int64_t sample_bytes() const override;
  // uint8 [B, H, W, 3] on any device → float32 [B, 3, H, W] on it.
  Tensor model_input(const Tensor& images, MemoryFormat format = MemoryFormat::Contiguous) const override;
  // Checks the buffers and fills each sample through fill_sample.
  void fill_batch(std::span<const int64_t> indices, int64_t epoch, const Batch& out) const final;
  const ImageTransformOptions& transform() const { return transform_; }

 protected:
  // Writes sample `index` as `epoch` sees it (S x S x 3 bytes, HWC) to `image` and returns its
  // label. Called concurrently for distinct samples.
  virtual int64_t fill_sample(int64_t index, int64_t epoch, uint8_t* image) const = 0;

  ImageTransformOptions transform_;

 private:
  // Per device: scale 1/(255 std) and shift -mean/std as [1, 3, 1, 1] float32, made once so a
  // step creates nothing on the host.
  mutable std::mutex constants_mutex_;
  mutable std::map<std::string, std::pair<Tensor, Tensor>> constants_;
};

class ImageFolder final : public RgbImageDataset {
 public:
  // Reads the layout of `split_dir` (e.g. /data/imagenet/train). `expected_classes`, when not
  // empty, must equal the folder's classes (the val split must have train's classes, or every
  // label would silently shift). Throws naming the folder when it is missing, has no class
  // folders, or a class folder has no .jpg/.jpeg files.
  ImageFolder(const std::string& split_dir, ImageTransformOptions transform, bool skip_bad_files = false,
              const std::vector<std::string>& expected_classes = {});

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  const std::string& description() const override { return description_; }
  // The classes and every sample's path below the split folder and label (not the files' bytes).
  uint64_t content_digest() const override { return content_digest_; }

  const std::vector<std::string>& classes() const { return classes_; }
  std::vector<std::string> class_names() const override { return classes_; }
  const std::string& path(int64_t index) const;
  int64_t label(int64_t index) const;
  // Loads sample `index` as the transform makes it for `epoch` into out (S * S * 3 bytes, HWC).
  // Throws naming the file when it cannot be read or decoded (whatever skip_bad_files says).
  void load(int64_t index, int64_t epoch, uint8_t* out) const;

  // Distinct files skipped so far (skip_bad_files), those met in `epoch` (the epoch load() and
  // fill_batch() were given), and the first one's reason.
  int64_t skipped_files() const;
  int64_t skipped_files(int64_t epoch) const;
  std::string first_skipped() const;
  // Distinct files decoded with a libjpeg warning (damaged data that still decodes, used as
  // decoded, as PIL does: JpegDecoder::decode) so far and in `epoch`, and the first one's path
  // and warning. (Per epoch, the counts of a data-parallel run's ranks add up: within an epoch
  // each rank loads its own shard.)
  int64_t files_with_decode_warnings() const;
  int64_t files_with_decode_warnings(int64_t epoch) const;
  std::string first_decode_warning() const;
  // Files with an image extension other than .jpg/.jpeg: not decoded, so never part of the set.
  int64_t ignored_files() const { return ignored_files_; }

 private:
  // A bad file's sample is replaced by the next readable one when skipping bad files.
  int64_t fill_sample(int64_t index, int64_t epoch, uint8_t* image) const override;

  struct Sample {
    std::string path;
    int64_t label;
  };

  std::string description_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  int64_t ignored_files_ = 0;
  uint64_t content_digest_ = 0;
  bool skip_bad_files_;
  mutable std::mutex skipped_mutex_;
  mutable std::set<int64_t> skipped_;
  mutable std::string first_skipped_;
  mutable std::atomic<bool> any_skipped_{false};
  mutable std::map<int64_t, std::set<int64_t>> skipped_in_epoch_;  // epoch -> indices (skipped_mutex_)
  mutable std::mutex warned_mutex_;
  mutable std::map<int64_t, std::set<int64_t>> warned_in_epoch_;  // epoch -> indices
  mutable std::string first_warning_;
};

// Random images made from (seed, split, index) alone; labels uniform over the classes, unrelated
// to the pixels (a held-out split scores chance; the training split can only be memorised). Costs
// no I/O or decoding: what a loader costs beyond this is the real pipeline's.
class SyntheticImages final : public RgbImageDataset {
 public:
  SyntheticImages(int64_t size, int64_t num_classes, ImageTransformOptions transform);
  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return num_classes_; }
  const std::string& description() const override { return description_; }

 private:
  int64_t fill_sample(int64_t index, int64_t epoch, uint8_t* image) const override;

  int64_t size_, num_classes_;
  std::string description_;
};

// The folder names of `split_dir` in ImageFolder's class order (sorted by bytes, like Python's
// sorted()). Throws when split_dir is not a readable directory.
std::vector<std::string> image_folder_classes(const std::string& split_dir);

}  // namespace dp
