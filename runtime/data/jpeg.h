// JPEG decoding and encoding on libjpeg-turbo's TurboJPEG API (the library under PIL and
// torchvision's decoders), with its DCT-domain downscaling: an image decoded at M/8 of its size
// (M = 1..8) costs roughly (M/8)^2 of a full decode, and the IDCT's scaling is a fair low-pass
// filter, so a crop that is shrunk anyway is decoded at the smallest scale that still leaves at
// least the output's pixels (NOTE [ Image pipeline ] in runtime/data/image_folder.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dp {

// An 8-bit RGB image: height rows of width * 3 bytes, no padding.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

struct JpegHeader {
  int width = 0;
  int height = 0;
  bool cmyk = false;  // CMYK or YCCK: decoded through CMYK and converted (Adobe's inverted convention)
};

// The dimension libjpeg-turbo produces for `dimension` scaled by eighths/8 (rounded up).
int jpeg_scaled_size(int dimension, int eighths);

// The smallest M in 1..8 such that a width x height image decoded at M/8 still has at least
// need_width x need_height pixels in a region that was crop_width x crop_height at full size;
// 8 (full size) when nothing smaller does. need_* and crop_* in pixels.
int jpeg_scale_for(int crop_width, int crop_height, int need_width, int need_height);

// One decoder per thread (it owns a TurboJPEG handle, which is not thread-safe). Errors are
// dp::Error with the reason only; callers add which file it was.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // Reads the header; throws when the bytes are not a JPEG (a PNG or GIF signature is named).
  JpegHeader read_header(std::span<const uint8_t> jpeg);
  // Decodes at eighths/8 of the full size (1..8) into `out` (its buffer reused). Warnings that
  // mean lost pixels (premature end of data: a truncated file) are errors; libjpeg's other
  // warnings (extraneous bytes before a marker, which some ImageNet files have; damaged
  // entropy-coded data that still decodes) are not, as in PIL: the image is decoded and the
  // warning returned ("Corrupt JPEG data: 3 extraneous bytes before marker 0xd9"), for the
  // caller to count. Empty when libjpeg had nothing to say.
  std::string decode(std::span<const uint8_t> jpeg, int eighths, RgbImage& out);

 private:
  void reset();  // a fresh handle after an error

  void* handle_;  // tjhandle
  std::vector<uint8_t> cmyk_;
};

// Baseline JPEG of an RGB image (4:2:0 subsampling unless `full_chroma`), quality 1..100.
std::vector<uint8_t> encode_jpeg(const RgbImage& image, int quality, bool full_chroma = false);

// Why `bytes` cannot be a JPEG ("a PNG image", "empty", ...), or "" when it starts like one.
std::string not_a_jpeg_reason(std::span<const uint8_t> bytes);

}  // namespace dp
