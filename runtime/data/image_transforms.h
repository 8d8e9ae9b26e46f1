// The image transforms of ImageNet training, with torchvision's geometry and PIL's pixels:
//   train: RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip   (random_resized_crop_box)
//   eval:  Resize(resize) + CenterCrop(crop)                              (resize_shorter_side, center_crop_box)
// and the one resampler both use, PIL's bilinear filter (antialiased when shrinking) in PIL's
// own fixed-point arithmetic, so that a resize here equals Image.resize(..., BILINEAR) to the
// grey level (tests/runtime/data/image_transforms_test.cpp compares with PIL's output).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/core/splitmix64.h"

namespace dp {

// A counter-based random stream for one sample's augmentation: its draws depend only on
// (seed, epoch, sample index), never on which loader thread or rank decodes the sample.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  uint64_t next_u64();
  double uniform(double low, double high);  // [low, high)
  int64_t integer(int64_t low, int64_t high);  // [low, high), high > low

 private:
  SplitMix64 rng_{0};
};

// A crop rectangle in pixels of the image it is taken from.
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

struct RandomResizedCropOptions {
  double scale_min = 0.08, scale_max = 1.0;           // of the image's area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};

// torchvision.transforms.RandomResizedCrop.get_params: ten tries at an area and a log-uniform
// aspect ratio that fit the image, then the centre crop of the image clamped to the ratio range.
CropBox random_resized_crop_box(int height, int width, const RandomResizedCropOptions& options, SampleRng& rng);

// torchvision's Resize(size) with an int: the shorter side becomes `size`, the longer one
// int(size * long / short). Returns {height, width}.
std::pair<int, int> resize_shorter_side(int height, int width, int size);

// torchvision's CenterCrop: top = round((height - crop_height) / 2), likewise left. The crop
// must fit (Resize makes it so in the eval transform).
CropBox center_crop_box(int height, int width, int crop_height, int crop_width);

// An 8-bit RGB image seen through a window: height rows of width pixels, row_stride bytes apart.
struct RgbView {
  const uint8_t* data = nullptr;
  int height = 0, width = 0;
  int64_t row_stride = 0;
};

// The region of the source a resize maps onto the whole output, in source pixels (fractional
// allowed: PIL's `box` argument). Filter taps outside the source are dropped, as in PIL.
struct SourceBox {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Reusable buffers for resize_bilinear (one per thread).
struct ResizeScratch {
  std::vector<int32_t> coefficients_h, coefficients_v;
  std::vector<int> bounds_h, bounds_v;
  std::vector<uint8_t> columns, column_sums;  // the horizontal pass's blocks, transposed
  std::vector<uint8_t> rows;                  // the horizontal pass's output
};

// PIL's ImagingResample with the bilinear filter: the horizontal pass first (into 8-bit rows),
// then the vertical pass, each a normalised triangle filter widened by the scale when
// shrinking, in 22-bit fixed point. The source box becomes a resize_height x resize_width image
// of which only `window` is computed (resize-then-crop at the cost of the crop: the eval
// transform); its window.height x window.width RGB pixels go to `out`, rows out_row_stride bytes
// apart, mirrored left-right when `flip` (RandomHorizontalFlip after the resize).
void resize_bilinear(const RgbView& source, const SourceBox& box, int resize_height, int resize_width,
                     const CropBox& window, uint8_t* out, int64_t out_row_stride, bool flip, ResizeScratch& scratch);

}  // namespace dp
