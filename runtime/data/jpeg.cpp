#include "runtime/data/jpeg.h"

#include <turbojpeg.h>

#include <algorithm>
#include <cstring>

#include "runtime/core/error.h"

namespace dp {

namespace {

tjhandle as_handle(void* h) { return static_cast<tjhandle>(h); }

// PIL's MULDIV255: a * b / 255 rounded, in integers.
int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

}  // namespace

int jpeg_scaled_size(int dimension, int eighths) {
  DP_CHECK(eighths >= 1 && eighths <= 8, "jpeg_scaled_size: scale must be 1..8 eighths, got ", eighths);
  return TJSCALED(dimension, (tjscalingfactor{eighths, 8}));
}

int jpeg_scale_for(int crop_width, int crop_height, int need_width, int need_height) {
  // Only 1/8, 2/8 and 4/8: libjpeg-turbo has SIMD inverse DCTs for those; 3/8, 5/8, 6/8, 7/8 run
  // its scalar scaled IDCTs and cost more than a full-size decode (loader_bench: 613 images/s
  // with every scale against 678 at full size on 500x375 photos).
  for (int m : {1, 2, 4}) {
    // The crop's extent after scaling (it scales like the image, up to rounding: keep a pixel spare).
    const double w = static_cast<double>(crop_width) * m / 8.0, h = static_cast<double>(crop_height) * m / 8.0;
    if (w >= need_width + 1 && h >= need_height + 1) return m;
  }
  return 8;
}

std::string not_a_jpeg_reason(std::span<const uint8_t> b) {
  if (b.empty()) return "the file is empty";
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "";
  auto starts = [&](std::initializer_list<uint8_t> sig) {
    return b.size() >= sig.size() && std::equal(sig.begin(), sig.end(), b.begin());
  };
  if (starts({0x89, 'P', 'N', 'G'})) return "it is a PNG image, not a JPEG (whatever its name says)";
  if (starts({'G', 'I', 'F', '8'})) return "it is a GIF image, not a JPEG";
  if (starts({'B', 'M'})) return "it is a BMP image, not a JPEG";
  if (starts({'R', 'I', 'F', 'F'})) return "it is a RIFF (WebP?) file, not a JPEG";
  char text[64];
  std::snprintf(text, sizeof text, "it does not start with a JPEG marker (first bytes %02X %02X)", b[0],
                b.size() > 1 ? b[1] : 0);
  return text;
}

JpegDecoder::JpegDecoder() : handle_(tjInitDecompress()) {
  DP_CHECK(handle_ != nullptr, "libjpeg-turbo: tjInitDecompress failed: ", tjGetErrorStr2(nullptr));
}

JpegDecoder::~JpegDecoder() { tjDestroy(as_handle(handle_)); }

void JpegDecoder::reset() {
  // TurboJPEG 2.1 leaves a handle whose header read failed half-way in libjpeg's header state:
  // the next file's header then reads as 0x0 without an error. A fresh handle costs microseconds
  // and errors are rare.
  tjDestroy(as_handle(handle_));
  handle_ = tjInitDecompress();
  DP_CHECK(handle_ != nullptr, "libjpeg-turbo: tjInitDecompress failed: ", tjGetErrorStr2(nullptr));
}

JpegHeader JpegDecoder::read_header(std::span<const uint8_t> jpeg) {
  const std::string not_jpeg = not_a_jpeg_reason(jpeg);
  DP_CHECK(not_jpeg.empty(), not_jpeg);
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(as_handle(handle_), jpeg.data(), static_cast<unsigned long>(jpeg.size()), &width, &height,
                          &subsampling, &colorspace) != 0) {
    const std::string reason = tjGetErrorStr2(as_handle(handle_));
    reset();
    throw Error("not a readable JPEG: " + reason);
  }
  DP_CHECK(width > 0 && height > 0, "the JPEG header gives an empty image (", width, "x", height, ")");
  return {width, height, colorspace == TJCS_CMYK || colorspace == TJCS_YCCK};
}

std::string JpegDecoder::decode(std::span<const uint8_t> jpeg, int eighths, RgbImage& out) {
  const JpegHeader header = read_header(jpeg);
  out.width = jpeg_scaled_size(header.width, eighths);
  out.height = jpeg_scaled_size(header.height, eighths);
  const size_t pixels = static_cast<size_t>(out.width) * static_cast<size_t>(out.height);
  out.pixels.resize(pixels * 3);
  // libjpeg-turbo cannot colour-convert CMYK to RGB: decode CMYK and convert as PIL does.
  uint8_t* target = out.pixels.data();
  if (header.cmyk) {
    cmyk_.resize(pixels * 4);
    target = cmyk_.data();
  }
  const int status = tjDecompress2(as_handle(handle_), jpeg.data(), static_cast<unsigned long>(jpeg.size()), target,
                                   out.width, 0, out.height, header.cmyk ? TJPF_CMYK : TJPF_RGB, 0);
  std::string warning;
  if (status != 0) {
    const std::string reason = tjGetErrorStr2(as_handle(handle_));
    // Premature end: the rest of the image was filled with grey. Other warnings leave every pixel.
    const bool fatal = tjGetErrorCode(as_handle(handle_)) == TJERR_FATAL ||
                       reason.find("Premature end") != std::string::npos;
    if (fatal) {
      reset();
      throw Error("the JPEG data is corrupt or truncated: " + reason);
    }
    warning = reason.empty() ? "libjpeg warned without a message" : reason;
  }
  if (header.cmyk) {
    // Adobe's JPEGs store inverted CMYK: r = c' k' / 255 with the stored values (PIL's cmyk2rgb
    // after its inversion: nk - nk c / 255 with c = 255 - c', nk = k').
    for (size_t p = 0; p < pixels; ++p) {
      const uint8_t* s = cmyk_.data() + 4 * p;
      const int nk = s[3];
      for (int c = 0; c < 3; ++c) out.pixels[3 * p + c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - s[c], nk), 0, 255));
    }
  }
  return warning;
}

std::vector<uint8_t> encode_jpeg(const RgbImage& image, int quality, bool full_chroma) {
  DP_CHECK(image.width > 0 && image.height > 0 &&
               image.pixels.size() == static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3,
           "encode_jpeg: ", image.pixels.size(), " bytes do not hold a ", image.width, "x", image.height, " RGB image");
  DP_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality must be in [1, 100], got ", quality);
  tjhandle h = tjInitCompress();
  DP_CHECK(h != nullptr, "libjpeg-turbo: tjInitCompress failed: ", tjGetErrorStr2(nullptr));
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int status = tjCompress2(h, image.pixels.data(), image.width, 0, image.height, TJPF_RGB, &buffer, &size,
                                 full_chroma ? TJSAMP_444 : TJSAMP_420, quality, 0);
  std::string error = status != 0 ? tjGetErrorStr2(h) : "";
  std::vector<uint8_t> bytes;
  if (status == 0) bytes.assign(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(h);
  DP_CHECK(status == 0, "libjpeg-turbo: compressing a ", image.width, "x", image.height, " image failed: ", error);
  return bytes;
}

}  // namespace dp
