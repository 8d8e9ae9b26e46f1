#include "runtime/data/image_transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "runtime/core/error.h"

namespace dp {

namespace {

// Python's round(): half to even (the default floating-point rounding mode).
int py_round(double v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index) {
  // Three words mixed in turn: distinct (seed, epoch, index) give unrelated streams.
  uint64_t key = SplitMix64(seed).next();
  key = SplitMix64(key ^ static_cast<uint64_t>(epoch)).next();
  key = SplitMix64(key ^ static_cast<uint64_t>(index)).next();
  rng_ = SplitMix64(key);
}

uint64_t SampleRng::next_u64() { return rng_.next(); }

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
  // (At least one pixel: a 1-pixel-wide image and a ratio above 2 round to 0, where torchvision
  // crops nothing and PIL's resize invents the pixels.)
  if (in_ratio < o.ratio_min) {
    h = std::max(1, py_round(w / o.ratio_min));
  } else if (in_ratio > o.ratio_max) {
    w = std::max(1, py_round(h * o.ratio_max));
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

// Both passes sum weighted bytes in int32, many output bytes at once: the horizontal pass on
// blocks of 16 source rows transposed into columns (a column holds one byte of each of the 16
// rows), the vertical pass on consecutive bytes of a row. convolve_bytes<kBytes> does
//   out[i] = clip8(2^21 + Σ_t k[t] in[t step + i])   for i < kBytes
// with clip8 the integer part (>> 22) clamped to [0, 255]: PIL's sums, exactly (the weights are
// non-negative and sum to 2^22, so no int32 overflows). A constant kBytes keeps the sums in
// registers.
#if defined(__AVX2__)
// kLanes sums per vector (GCC's vector extensions) and intrinsics to widen and narrow bytes,
// which GCC 12 turns into scalar code when written with __builtin_convertvector.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#else
constexpr int kLanes = 8;
#endif
using Sums = int32_t __attribute__((vector_size(4 * kLanes)));

// kLanes bytes at p, widened to int32.
Sums load_widened(const uint8_t* p) {
#if defined(__AVX512F__)
  // (maskz: the plain intrinsic trips -Wmaybe-uninitialized in GCC 12)
  return reinterpret_cast<Sums>(
      _mm512_maskz_cvtepu8_epi32(0xFFFF, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#else
  return reinterpret_cast<Sums>(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#endif
}

// clip8 of kLanes sums, stored as bytes at out.
void store_clipped(uint8_t* out, Sums sums) {
  const Sums v = sums >> kPrecisionBits;
#if defined(__AVX512F__)
  // vpmovusdb saturates to 255 (this form of it does not trip GCC 12's warning)
  const Sums nonnegative = v < 0 ? 0 : v;
  _mm512_mask_cvtusepi32_storeu_epi8(out, 0xFFFF, reinterpret_cast<__m512i>(nonnegative));
#else
  // packus saturates signed values to [0, 65535], then to [0, 255]
  const __m256i w = reinterpret_cast<__m256i>(v);
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(words, words));
#endif
}

template <int kBytes>
void convolve_bytes(const uint8_t* in, int64_t step, const int32_t* k, int taps, uint8_t* out) {
  static_assert(kBytes % kLanes == 0);
  constexpr int kVectors = kBytes / kLanes;
  Sums sums[kVectors];
  for (Sums& s : sums) s = (1 << (kPrecisionBits - 1)) + Sums{};
  for (int t = 0; t < taps; ++t, in += step) {
    for (int j = 0; j < kVectors; ++j) sums[j] += load_widened(in + j * kLanes) * k[t];
  }
  for (int j = 0; j < kVectors; ++j) store_clipped(out + j * kLanes, sums[j]);
}
#else
// Without AVX2: the same sums an int32 at a time, left to the compiler to vectorise.
inline uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

template <int kBytes>
void convolve_bytes(const uint8_t* in, int64_t step, const int32_t* k, int taps, uint8_t* out) {
  int32_t sums[kBytes];
  for (int i = 0; i < kBytes; ++i) sums[i] = 1 << (kPrecisionBits - 1);
  for (int t = 0; t < taps; ++t, in += step) {
    for (int i = 0; i < kBytes; ++i) sums[i] += in[i] * k[t];
  }
  for (int i = 0; i < kBytes; ++i) out[i] = clip8(sums[i]);
}
#endif

// The horizontal pass's blocks: 16 rows, transposed 16x16 bytes at a time.
constexpr int kBlockRows = 16;
using Tile = uint8_t __attribute__((vector_size(16)));

// One round of a 16x16 byte transpose: row i interleaved with row i + 8, which rotates the 8-bit
// (row, column) index of every byte left by one bit; four rounds swap row and column.
void interleave_round(const Tile (&m)[16], Tile (&t)[16]) {
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = __builtin_shufflevector(m[i], m[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    t[2 * i + 1] =
        __builtin_shufflevector(m[i], m[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  }
}

// (Always inlined, so that the tile stays in registers.)
[[gnu::always_inline]] inline void transpose(Tile (&m)[16]) {
  Tile t[16];
  interleave_round(m, t);
  interleave_round(t, m);
  interleave_round(m, t);
  interleave_round(t, m);
}

// The first n <= 16 bytes at p, zeros after them (a whole vector in one load when n == 16).
Tile load_tile_row(const uint8_t* p, int n) {
  Tile v{};
  if (n == 16) {
    std::memcpy(&v, p, 16);
  } else {
    std::memcpy(&v, p, static_cast<size_t>(n));
  }
  return v;
}

// Stores the first n <= 16 bytes of v (a whole vector in one store when n == 16).
void store_tile_row(uint8_t* p, Tile v, int n) {
  if (n == 16) {
    std::memcpy(p, &v, 16);
  } else {
    std::memcpy(p, &v, static_cast<size_t>(n));
  }
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

  // The source columns the window's output columns read.
  int col_first = src.width, col_last = 0;
  for (int xx = window.left; xx < window.left + window.width; ++xx) {
    col_first = std::min(col_first, bounds_h[2 * xx]);
    col_last = std::max(col_last, bounds_h[2 * xx] + bounds_h[2 * xx + 1]);
  }
  DP_ASSERT(col_last > col_first);

  // Horizontal pass: source rows [row_first, row_last) → rows x window.width, 8-bit, 16 rows at a
  // time. The block's source bytes are transposed into columns (one vector of 16 rows per byte of
  // a row), so each output byte of all 16 rows is a sum of whole columns times scalar weights; the
  // sums, rounded to bytes, are transposed back into rows, mirrored when flipping.
  const int out_width = window.width;
  const int temp_stride = out_width * 3;
  const int in_bytes = (col_last - col_first) * 3;
  const auto round_up = [](int n) { return static_cast<size_t>((n + 15) / 16 * 16); };
  // (16 bytes more: the vertical pass reads whole vectors, past the end of the last row)
  scratch.rows.resize(static_cast<size_t>(rows) * temp_stride + 16);
  scratch.columns.resize(round_up(in_bytes) * kBlockRows);
  scratch.column_sums.resize(round_up(temp_stride) * kBlockRows);
  uint8_t* const temp = scratch.rows.data();
  uint8_t* const columns = scratch.columns.data();
  uint8_t* const column_sums = scratch.column_sums.data();
  Tile tile[16];
  for (int y0 = 0; y0 < rows; y0 += kBlockRows) {
    const int block_rows = std::min(kBlockRows, rows - y0);
    // Source bytes → columns; a short last block repeats its last row in the unused lanes, and
    // a row's last tile is copied through zeros so as not to read past the row.
    const uint8_t* in[kBlockRows];
    for (int r = 0; r < kBlockRows; ++r) {
      in[r] = src.data + static_cast<int64_t>(row_first + y0 + std::min(r, block_rows - 1)) * src.row_stride +
              3 * col_first;
    }
    for (int j0 = 0; j0 < in_bytes; j0 += 16) {
      const int n = std::min(16, in_bytes - j0);
      for (int r = 0; r < kBlockRows; ++r) tile[r] = load_tile_row(in[r] + j0, n);
      transpose(tile);
      std::memcpy(columns + static_cast<size_t>(j0) * kBlockRows, tile, sizeof tile);
    }
    // Columns → rounded sums, also as columns.
    for (int xo = 0; xo < out_width; ++xo) {
      const int xx = window.left + xo;
      const int xmin = bounds_h[2 * xx] - col_first, n = bounds_h[2 * xx + 1];
      const int32_t* k = coeff_h.data() + static_cast<size_t>(xx) * ksize_h;
      const int xt = flip ? out_width - 1 - xo : xo;
      convolve_bytes<3 * kBlockRows>(columns + static_cast<size_t>(3 * xmin) * kBlockRows, 3 * kBlockRows, k, n,
                                     column_sums + static_cast<size_t>(3 * xt) * kBlockRows);
    }
    // Columns → the block's rows of the horizontal pass's output.
    for (int j0 = 0; j0 < temp_stride; j0 += 16) {
      std::memcpy(tile, column_sums + static_cast<size_t>(j0) * kBlockRows, sizeof tile);
      transpose(tile);
      const int n = std::min(16, temp_stride - j0);
      for (int r = 0; r < block_rows; ++r) {
        store_tile_row(temp + static_cast<size_t>(y0 + r) * temp_stride + j0, tile[r], n);
      }
    }
  }
  // Vertical pass: 64 bytes of an output row at a time (then 16 at its end), each tap adding as
  // many bytes of a row of the horizontal pass times its weight. The same sums as PIL's.
  for (int yo = 0; yo < window.height; ++yo) {
    const int yy = window.top + yo;
    const int ymin = bounds_v[2 * yy] - row_first, n = bounds_v[2 * yy + 1];
    const int32_t* k = coeff_v.data() + static_cast<size_t>(yy) * ksize_v;
    const uint8_t* rows_in = temp + static_cast<size_t>(ymin) * temp_stride;
    uint8_t* o = out + static_cast<int64_t>(yo) * out_row_stride;
    int i = 0;
    for (; i + 64 <= temp_stride; i += 64) convolve_bytes<64>(rows_in + i, temp_stride, k, n, o + i);
    for (; i < temp_stride; i += 16) {
      uint8_t last[16];
      convolve_bytes<16>(rows_in + i, temp_stride, k, n, last);
      std::memcpy(o + i, last, static_cast<size_t>(std::min(16, temp_stride - i)));
    }
  }
}

}  // namespace dp
