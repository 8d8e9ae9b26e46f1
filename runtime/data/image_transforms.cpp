#include "runtime/data/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/error.h"

namespace dp {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Python's round(): half to even (the default floating-point rounding mode).
int py_round(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  // Three words mixed in turn: distinct (seed, epoch, index) give unrelated streams.
  uint64_t x = seed;
  state_ = splitmix64(x);
  x = state_ ^ static_cast<uint64_t>(epoch);
  state_ = splitmix64(x);
  x = state_ ^ static_cast<uint64_t>(index);
  state_ = splitmix64(x);
}

uint64_t SampleRng::next_u64() { return splitmix64(state_); }

double SampleRng::uniform(double low, double high) {
  const double u = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;  // [0, 1)
  return low + (high - low) * u;
}

int64_t SampleRng::integer(int64_t low, int64_t high) {
  DP_CHECK(high > low, "SampleRng::integer: empty range [", low, ", ", high, ")");
  const unsigned __int128 product = static_cast<unsigned __int128>(next_u64()) * static_cast<uint64_t>(high - low);
  return low + static_cast<int64_t>(product >> 64);  // Lemire's multiply-shift (bias < 2^-40 here)
}

CropBox random_resized_crop_box(int height, int width, const RandomResizedCropOptions& o, SampleRng& rng) {
  DP_CHECK(height > 0 && width > 0, "random_resized_crop: empty image ", height, "x", width);
  const double area = static_cast<double>(height) * width;
  const double log_ratio_min = std::log(o.ratio_min), log_ratio_max = std::log(o.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(o.scale_min, o.scale_max);
    const double aspect = std::exp(rng.uniform(log_ratio_min, log_ratio_max));
    const int w = py_round(std::sqrt(target_area * aspect));
    const int h = py_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = static_cast<int>(rng.integer(0, height - h + 1));
      const int left = static_cast<int>(rng.integer(0, width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback: the centre crop, clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < o.ratio_min) {
    h = py_round(w / o.ratio_min);
  } else if (in_ratio > o.ratio_max) {
    w = py_round(h * o.ratio_max);
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

std::pair<int, int> resize_shorter_side(int height, int width, int size) {
  DP_CHECK(height > 0 && width > 0 && size > 0, "resize: need a positive image and size, got ", height, "x", width,
           " to ", size);
  const bool portrait = width <= height;
  const int shorter = portrait ? width : height, longer = portrait ? height : width;
  // int(size * long / short) in Python: true division, then truncation.
  const int new_long = static_cast<int>(static_cast<double>(size) * longer / shorter);
  return portrait ? std::pair{new_long, size} : std::pair{size, new_long};
}

CropBox center_crop_box(int height, int width, int crop_height, int crop_width) {
  DP_CHECK(crop_height > 0 && crop_width > 0 && crop_height <= height && crop_width <= width, "center_crop: a ",
           crop_height, "x", crop_width, " crop does not fit a ", height, "x", width, " image");
  return {py_round((height - crop_height) / 2.0), py_round((width - crop_width) / 2.0), crop_height, crop_width};
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's PRECISION_BITS for 8-bit images

double bilinear_filter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs + normalize_coeffs_8bpc: for each output position, the first input
// index and tap count (bounds) and ksize fixed-point weights. Returns ksize.
int precompute_coefficients(int in_size, float in0, float in1, int out_size, std::vector<int>& bounds,
                            std::vector<int32_t>& coefficients) {
  const double scale = static_cast<double>(in1 - in0) / out_size;  // float difference, as in PIL
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;  // the bilinear filter's support is 1
  const int ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  bounds.resize(2 * static_cast<size_t>(out_size));
  coefficients.assign(static_cast<size_t>(out_size) * ksize, 0);
  std::vector<double> k(ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = bilinear_filter((x + xmin - center + 0.5) * ss);
      ww += k[x];
    }
    int32_t* kk = coefficients.data() + static_cast<size_t>(xx) * ksize;
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      const double fixed = w * (1 << kPrecisionBits);
      kk[x] = static_cast<int32_t>(w < 0 ? -0.5 + fixed : 0.5 + fixed);
    }
    bounds[2 * xx] = xmin;
    bounds[2 * xx + 1] = std::max(xmax, 0);
  }
  return ksize;
}

inline uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

}  // namespace

void resize_bilinear(const RgbView& src, const SourceBox& box, int resize_height, int resize_width,
                     const CropBox& window, uint8_t* out, int64_t out_row_stride, bool flip, ResizeScratch& scratch) {
  DP_CHECK(src.data != nullptr && src.height > 0 && src.width > 0 && resize_height > 0 && resize_width > 0,
           "resize_bilinear: empty image (", src.height, "x", src.width, " to ", resize_height, "x", resize_width, ")");
  DP_CHECK(box.x0 >= 0 && box.y0 >= 0 && box.x1 <= src.width && box.y1 <= src.height && box.x1 > box.x0 &&
               box.y1 > box.y0,
           "resize_bilinear: box [", box.x0, ", ", box.y0, ", ", box.x1, ", ", box.y1, "] is not inside the ",
           src.width, "x", src.height, " image");
  DP_CHECK(window.top >= 0 && window.left >= 0 && window.height > 0 && window.width > 0 &&
               window.top + window.height <= resize_height && window.left + window.width <= resize_width,
           "resize_bilinear: window ", window.height, "x", window.width, " at (", window.top, ", ", window.left,
           ") is not inside the ", resize_height, "x", resize_width, " output");
  std::vector<int>& bounds_h = scratch.bounds_h;
  std::vector<int32_t>& coeff_h = scratch.coefficients_h;
  const int ksize_h = precompute_coefficients(src.width, static_cast<float>(box.x0), static_cast<float>(box.x1),
                                              resize_width, bounds_h, coeff_h);
  std::vector<int>& bounds_v = scratch.bounds_v;
  std::vector<int32_t>& coeff_v = scratch.coefficients_v;
  const int ksize_v = precompute_coefficients(src.height, static_cast<float>(box.y0), static_cast<float>(box.y1),
                                              resize_height, bounds_v, coeff_v);
  // The source rows the window's output rows read: the horizontal pass produces only those.
  const int y_first = window.top, y_last = window.top + window.height - 1;
  const int row_first = bounds_v[2 * y_first];
  const int row_last = bounds_v[2 * y_last] + bounds_v[2 * y_last + 1];
  const int rows = row_last - row_first;
  DP_ASSERT(rows > 0);

  // Horizontal pass: source rows [row_first, row_last) → rows x window.width, 8-bit.
  const int out_width = window.width;
  const int64_t temp_stride = static_cast<int64_t>(out_width) * 3;
  scratch.rows.resize(static_cast<size_t>(rows) * temp_stride);
  constexpr int32_t kHalf = 1 << (kPrecisionBits - 1);
  for (int y = 0; y < rows; ++y) {
    const uint8_t* in = src.data + static_cast<int64_t>(row_first + y) * src.row_stride;
    uint8_t* t = scratch.rows.data() + y * temp_stride;
    for (int xo = 0; xo < out_width; ++xo) {
      const int xx = window.left + xo;
      const int xmin = bounds_h[2 * xx], n = bounds_h[2 * xx + 1];
      const int32_t* k = coeff_h.data() + static_cast<size_t>(xx) * ksize_h;
      const uint8_t* p = in + 3 * xmin;
      int32_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
      for (int x = 0; x < n; ++x) {
        s0 += p[3 * x] * k[x];
        s1 += p[3 * x + 1] * k[x];
        s2 += p[3 * x + 2] * k[x];
      }
      t[3 * xo] = clip8(s0);
      t[3 * xo + 1] = clip8(s1);
      t[3 * xo + 2] = clip8(s2);
    }
  }
  // Vertical pass, a row at a time: each tap adds a whole source row times its weight into
  // int32 sums (contiguous, so the compiler vectorises it), then the row is rounded out,
  // mirrored when flipping. The same sums in the same order as PIL's per-pixel loop.
  std::vector<int32_t>& sums = scratch.sums;
  sums.resize(static_cast<size_t>(temp_stride));
  for (int yo = 0; yo < window.height; ++yo) {
    const int yy = window.top + yo;
    const int ymin = bounds_v[2 * yy] - row_first, n = bounds_v[2 * yy + 1];
    const int32_t* k = coeff_v.data() + static_cast<size_t>(yy) * ksize_v;
    std::fill(sums.begin(), sums.end(), kHalf);
    int32_t* __restrict acc = sums.data();
    for (int y = 0; y < n; ++y) {
      const uint8_t* __restrict row = scratch.rows.data() + static_cast<int64_t>(ymin + y) * temp_stride;
      const int32_t weight = k[y];
      for (int64_t i = 0; i < temp_stride; ++i) acc[i] += row[i] * weight;
    }
    uint8_t* o = out + static_cast<int64_t>(yo) * out_row_stride;
    if (!flip) {
      for (int64_t i = 0; i < temp_stride; ++i) o[i] = clip8(acc[i]);
    } else {
      for (int xo = 0; xo < out_width; ++xo) {
        uint8_t* dst = o + 3 * (out_width - 1 - xo);
        dst[0] = clip8(acc[3 * xo]);
        dst[1] = clip8(acc[3 * xo + 1]);
        dst[2] = clip8(acc[3 * xo + 2]);
      }
    }
  }
}

}  // namespace dp
