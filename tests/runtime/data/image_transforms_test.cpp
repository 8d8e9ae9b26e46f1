// The image transforms against torchvision's geometry and PIL's pixels
// (tests/fixtures/image_transforms.safetensors, made by make_image_fixtures.py), and the
// statistics of the random crop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/reference.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/data/image_transforms.h"

namespace dp {
namespace {

class ImageTransformsTest : public ::testing::Test {
 protected:
  std::vector<uint8_t> bytes(const std::string& name) {
    const Tensor t = fixture.tensor(name, cpu);
    const uint8_t* p = t.data<uint8_t>();
    return std::vector<uint8_t>(p, p + t.numel());
  }
  Shape shape(const std::string& name) { return fixture.tensor(name, cpu).shape(); }

  // Largest absolute difference of two equally long byte arrays.
  static int max_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
    EXPECT_EQ(a.size(), b.size());
    int worst = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
  }

  CpuBackend backend{1};
  Device cpu{&backend};
  testing::Fixture fixture{"image_transforms"};
  std::vector<uint8_t> source = bytes("source");  // [47, 61, 3]
  RgbView view{source.data(), 47, 61, 61 * 3};
  ResizeScratch scratch;
};

TEST_F(ImageTransformsTest, ResizeEqualsPilBilinear) {
  for (const std::string name : {"shrink", "enlarge", "mixed", "box", "identity"}) {
    SCOPED_TRACE(name);
    const auto [w, h] = fixture.option_pair("size_" + name);
    double b[4];
    ASSERT_EQ(std::sscanf(fixture.option("box_" + name).c_str(), "%lf,%lf,%lf,%lf", &b[0], &b[1], &b[2], &b[3]), 4);
    std::vector<uint8_t> out(static_cast<size_t>(w * h * 3));
    resize_bilinear(view, {b[0], b[1], b[2], b[3]}, static_cast<int>(h), static_cast<int>(w),
                    {0, 0, static_cast<int>(h), static_cast<int>(w)}, out.data(), w * 3, false, scratch);
    // PIL's own fixed-point arithmetic: equal, not merely within a grey level.
    EXPECT_EQ(max_difference(out, bytes("resize_" + name)), 0);
  }
}

TEST_F(ImageTransformsTest, CropThenResizeEqualsTorchvisionTrainPath) {
  // source.crop((5, 7, 40, 30)): the taps stop at the crop's edges.
  const RgbView crop{source.data() + 7 * view.row_stride + 5 * 3, 23, 35, view.row_stride};
  std::vector<uint8_t> out(16 * 16 * 3), flipped(out.size());
  resize_bilinear(crop, {0, 0, 35, 23}, 16, 16, {0, 0, 16, 16}, out.data(), 16 * 3, false, scratch);
  EXPECT_EQ(max_difference(out, bytes("crop_resize")), 0);
  // The flip mirrors each row of the same pixels.
  resize_bilinear(crop, {0, 0, 35, 23}, 16, 16, {0, 0, 16, 16}, flipped.data(), 16 * 3, true, scratch);
  for (int y = 0; y < 16; ++y)
    for (int x = 0; x < 16; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(flipped[(y * 16 + x) * 3 + c], out[(y * 16 + 15 - x) * 3 + c]);
}

TEST_F(ImageTransformsTest, EvalWindowEqualsResizeThenCenterCrop) {
  const auto [rh, rw] = resize_shorter_side(47, 61, 40);
  EXPECT_EQ(rh, 40);
  EXPECT_EQ(rw, 51);  // int(40 * 61 / 47) = int(51.9...)
  const CropBox crop = center_crop_box(rh, rw, 32, 32);
  EXPECT_EQ(crop, (CropBox{4, 10, 32, 32}));  // round(8 / 2), round(19 / 2) = round(9.5) = 10 (half to even)
  std::vector<uint8_t> out(32 * 32 * 3);
  resize_bilinear(view, {0, 0, 61, 47}, rh, rw, crop, out.data(), 32 * 3, false, scratch);
  EXPECT_EQ(max_difference(out, bytes("eval_40_32")), 0);
}

// PIL 9.4's bilinear resample written pixel by pixel as Resample.c has it (precompute_coeffs,
// normalize_coeffs_8bpc, the horizontal then the vertical 8-bit pass over the whole image), to
// check resize_bilinear's blocked, vectorised passes on many shapes, boxes, windows and flips.
struct PilCoefficients {
  int ksize = 0;
  std::vector<int> xmin, count;
  std::vector<int32_t> k;  // ksize per output pixel
};

// (Resample.c takes the box as floats and subtracts them as floats.)
PilCoefficients pil_coefficients(int in_size, float in0, float in1, int out_size) {
  PilCoefficients c;
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filterscale = std::max(scale, 1.0), support = filterscale;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale, ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    std::vector<double> w(std::max(xmax, 0));
    double ww = 0;
    for (int x = 0; x < xmax; ++x) {
      const double d = std::fabs((x + xmin - center + 0.5) * ss);
      w[x] = d < 1.0 ? 1.0 - d : 0.0;
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) w[x] /= ww;
      c.k[static_cast<size_t>(xx) * c.ksize + x] = static_cast<int32_t>(0.5 + w[x] * (1 << 22));
    }
    c.xmin.push_back(xmin);
    c.count.push_back(std::max(xmax, 0));
  }
  return c;
}

uint8_t pil_clip8(int32_t v) {
  if (v >= (1 << 22 << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> 22);
}

// The whole out_h x out_w resize of an h x w RGB image (rows stride bytes apart).
std::vector<uint8_t> pil_resize(const uint8_t* src, int h, int w, int64_t stride, const SourceBox& b, int out_h,
                                int out_w) {
  const PilCoefficients ch = pil_coefficients(w, static_cast<float>(b.x0), static_cast<float>(b.x1), out_w);
  const PilCoefficients cv = pil_coefficients(h, static_cast<float>(b.y0), static_cast<float>(b.y1), out_h);
  std::vector<uint8_t> temp(static_cast<size_t>(h) * out_w * 3), out(static_cast<size_t>(out_h) * out_w * 3);
  for (int y = 0; y < h; ++y) {
    for (int xx = 0; xx < out_w; ++xx) {
      for (int c = 0; c < 3; ++c) {
        int32_t ss = 1 << 21;
        for (int x = 0; x < ch.count[xx]; ++x) {
          ss += src[y * stride + (x + ch.xmin[xx]) * 3 + c] * ch.k[static_cast<size_t>(xx) * ch.ksize + x];
        }
        temp[(static_cast<size_t>(y) * out_w + xx) * 3 + c] = pil_clip8(ss);
      }
    }
  }
  for (int yy = 0; yy < out_h; ++yy) {
    for (int i = 0; i < out_w * 3; ++i) {
      int32_t ss = 1 << 21;
      for (int y = 0; y < cv.count[yy]; ++y) {
        ss += temp[static_cast<size_t>(y + cv.xmin[yy]) * out_w * 3 + i] * cv.k[static_cast<size_t>(yy) * cv.ksize + y];
      }
      out[static_cast<size_t>(yy) * out_w * 3 + i] = pil_clip8(ss);
    }
  }
  return out;
}

TEST(ImageTransformsReference, ResizeEqualsPixelByPixelPilOnRandomCases) {
  std::mt19937 gen(12345);
  const auto uniform_int = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(gen); };
  const auto uniform = [&](double low, double high) { return std::uniform_real_distribution<double>(low, high)(gen); };
  ResizeScratch scratch;  // reused, as by a loader thread
  for (int trial = 0; trial < 400; ++trial) {
    // Mostly small images (many blocks of 16 rows and tiles of 16 bytes cut short), some large.
    const int large = trial % 7 == 0 ? 300 : 60;
    const int h = uniform_int(1, large), w = uniform_int(1, large);
    const int64_t stride = static_cast<int64_t>(w + uniform_int(0, 3)) * 3;
    std::vector<uint8_t> src(static_cast<size_t>(stride * h));  // no slack: reading past it shows under ASan
    for (uint8_t& v : src) v = static_cast<uint8_t>(trial % 3 == 0 ? 255 * uniform_int(0, 1) : uniform_int(0, 255));
    SourceBox box{0, 0, static_cast<double>(w), static_cast<double>(h)};
    if (trial % 2 == 1) {  // fractional
      box.x0 = uniform(0, w * 0.9);
      box.x1 = uniform(box.x0 + w * 0.05, w);
      box.y0 = uniform(0, h * 0.9);
      box.y1 = uniform(box.y0 + h * 0.05, h);
    }
    const int out_h = uniform_int(1, large), out_w = uniform_int(1, large);  // shrink and enlarge
    CropBox window{0, 0, out_h, out_w};
    if (trial % 3 != 0) {
      window.top = uniform_int(0, out_h - 1);
      window.left = uniform_int(0, out_w - 1);
      window.height = uniform_int(1, out_h - window.top);
      window.width = uniform_int(1, out_w - window.left);
    }
    const bool flip = trial % 4 >= 2;
    const int64_t out_stride = static_cast<int64_t>(window.width) * 3 + uniform_int(0, 5);
    std::vector<uint8_t> out(static_cast<size_t>(out_stride * window.height), 7);
    resize_bilinear({src.data(), h, w, stride}, box, out_h, out_w, window, out.data(), out_stride, flip, scratch);
    const std::vector<uint8_t> expected = pil_resize(src.data(), h, w, stride, box, out_h, out_w);
    for (int y = 0; y < window.height; ++y) {
      for (int x = 0; x < window.width; ++x) {
        const int xs = window.left + (flip ? window.width - 1 - x : x);
        const uint8_t* want = expected.data() + (static_cast<size_t>(window.top + y) * out_w + xs) * 3;
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(out[y * out_stride + x * 3 + c], want[c])
              << "trial " << trial << ": " << h << "x" << w << " box [" << box.x0 << ", " << box.y0 << ", " << box.x1
              << ", " << box.y1 << "] to " << out_h << "x" << out_w << ", window " << window.height << "x"
              << window.width << " at (" << window.top << ", " << window.left << "), flip " << flip << ", pixel (" << y
              << ", " << x << ", " << c << ")";
        }
      }
      // Bytes between rows are left alone.
      for (int64_t i = window.width * 3; i < out_stride; ++i) ASSERT_EQ(out[y * out_stride + i], 7);
    }
  }
}

TEST(ImageGeometry, ResizeShorterSideFollowsTorchvision) {
  EXPECT_EQ(resize_shorter_side(375, 500, 256), (std::pair{256, 341}));  // int(256 * 500 / 375) = 341
  EXPECT_EQ(resize_shorter_side(500, 375, 256), (std::pair{341, 256}));
  EXPECT_EQ(resize_shorter_side(300, 300, 256), (std::pair{256, 256}));
  EXPECT_EQ(resize_shorter_side(10, 1000, 7), (std::pair{7, 700}));
  EXPECT_THROW(resize_shorter_side(0, 10, 5), Error);
}

TEST(ImageGeometry, CenterCropRoundsHalfToEvenAndRefusesWhatDoesNotFit) {
  EXPECT_EQ(center_crop_box(256, 341, 224, 224), (CropBox{16, 58, 224, 224}));  // round(58.5) = 58
  EXPECT_EQ(center_crop_box(256, 343, 224, 224), (CropBox{16, 60, 224, 224}));  // round(59.5) = 60
  EXPECT_THROW(center_crop_box(100, 100, 101, 50), Error);
}

TEST(ImageGeometry, RandomResizedCropStaysInsideAndFollowsItsRanges) {
  const RandomResizedCropOptions o;  // scale [0.08, 1], ratio [3/4, 4/3]
  for (int64_t i = 0; i < 20000; ++i) {
    SampleRng rng(7, 0, i);
    const int h = 100 + static_cast<int>(i % 400), w = 80 + static_cast<int>((i * 7) % 500);
    const CropBox c = random_resized_crop_box(h, w, o, rng);
    ASSERT_TRUE(c.top >= 0 && c.left >= 0 && c.height > 0 && c.width > 0 && c.top + c.height <= h &&
                c.left + c.width <= w)
        << i << ": " << c.top << "," << c.left << " " << c.height << "x" << c.width << " in " << h << "x" << w;
    const double fraction = static_cast<double>(c.height) * c.width / (static_cast<double>(h) * w);
    const double ratio = static_cast<double>(c.width) / c.height;
    // Whole pixels move the area and ratio a little beyond the drawn values; a fallback crop
    // (the clamped centre) has the image's full height or width.
    const bool fallback = c.height == h || c.width == w;
    ASSERT_TRUE(fallback || (fraction >= 0.08 * 0.9 && ratio >= 0.75 * 0.9 && ratio <= 4.0 / 3.0 * 1.1))
        << i << ": area fraction " << fraction << ", ratio " << ratio;
  }
  // On square 256x256 images every draw's distribution is known: torchvision's algorithm
  // simulated with numpy (400,000 samples) gives a mean area fraction of 0.4793 (std 0.234)
  // and no fallbacks. 20,000 samples put the mean within 0.01 of it.
  double area_sum = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    SampleRng rng(11, 3, i);
    const CropBox c = random_resized_crop_box(256, 256, o, rng);
    area_sum += static_cast<double>(c.height) * c.width / (256.0 * 256.0);
  }
  EXPECT_NEAR(area_sum / n, 0.4793, 0.01);
}

TEST(ImageGeometry, RandomResizedCropFallsBackToTheClampedCentre) {
  // A 10x1000 strip: no draw of ratio <= 4/3 fits, so the centre crop clamped to 4/3 is taken.
  SampleRng rng(1, 0, 0);
  EXPECT_EQ(random_resized_crop_box(10, 1000, {}, rng), (CropBox{0, (1000 - 13) / 2, 10, 13}));  // round(13.3)
  // A 1000x10 strip: clamped to 3/4 the other way.
  EXPECT_EQ(random_resized_crop_box(1000, 10, {}, rng), (CropBox{(1000 - 13) / 2, 0, 13, 10}));  // round(13.3)
  // The whole image when its ratio is inside the range: with the area fixed at the image's, a
  // draw fits only when its ratio rounds to the image's (rare at 1000x1000; not for this seed).
  const RandomResizedCropOptions whole_area{.scale_min = 1, .scale_max = 1, .ratio_min = 0.5, .ratio_max = 2};
  EXPECT_EQ(random_resized_crop_box(1000, 1000, whole_area, rng), (CropBox{0, 0, 1000, 1000}));
  // A 1-pixel-wide image with every ratio above 2: 1 / 3 rounds to no row at all; one is kept.
  const RandomResizedCropOptions wide{.scale_min = 1, .scale_max = 1, .ratio_min = 3, .ratio_max = 3};
  EXPECT_EQ(random_resized_crop_box(1, 1, wide, rng), (CropBox{0, 0, 1, 1}));
}

TEST(SampleRngTest, DependsOnSeedEpochAndIndexOnly) {
  SampleRng a(3, 1, 42), b(3, 1, 42), c(3, 2, 42), d(3, 1, 43), e(4, 1, 42);
  const uint64_t va = a.next_u64();
  EXPECT_EQ(va, b.next_u64());
  EXPECT_NE(va, c.next_u64());
  EXPECT_NE(va, d.next_u64());
  EXPECT_NE(va, e.next_u64());
  // Uniform integers cover their range evenly.
  SampleRng r(0, 0, 0);
  std::map<int64_t, int> counts;
  for (int i = 0; i < 60000; ++i) ++counts[r.integer(-2, 4)];
  ASSERT_EQ(counts.size(), 6u);
  for (const auto& [v, n] : counts) EXPECT_NEAR(n, 10000, 500) << v;
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform(0.25, 0.5);
    ASSERT_TRUE(u >= 0.25 && u < 0.5);
  }
}

}  // namespace
}  // namespace dp
