// The CPU's max pooling has vectorised float32 paths (2×2/stride 2 with contiguous loads, any
// other window with one gather per tap; 16 windows at once, the last block of a row masked). They
// must pick exactly what the scalar path picks — float64 runs the scalar code — ties to the first
// in scan order, NaN wins, a window of -inf keeps its first index, padding never wins, at every
// row width.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

void expect_vector_path_matches_scalar(const Pool2dParams& p, std::mt19937& rng) {
  CpuBackend backend(2);
  Device cpu(&backend);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t W : {2, 3, 5, 14, 15, 28, 29, 32, 33, 34, 40, 66}) {
    for (int64_t H : {2, 5, 28}) {
      SCOPED_TRACE("kernel " + std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " stride " +
                   std::to_string(p.stride_w) + " pad " + std::to_string(p.pad_w) + " H " + std::to_string(H) +
                   " W " + std::to_string(W));
      const int64_t OH = (H + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
      const int64_t OW = (W + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
      if (OH < 1 || OW < 1) continue;
      const Shape shape{2, 3, H, W};
      std::vector<float> v(static_cast<size_t>(numel_of(shape)));
      // Few distinct values: many ties, -inf among them. A NaN now and then, sometimes two in a window.
      for (float& x : v) x = rng() % 6 == 0 ? -inf : static_cast<float>(static_cast<int>(rng() % 5) - 2);
      for (size_t i = 0; i < v.size(); i += 1 + rng() % 23) v[i] = nan;
      std::vector<double> vd(v.begin(), v.end());
      Tensor x = from_vector<float>(v, shape, cpu), xd = from_vector<double>(vd, shape, cpu);
      const Shape out{2, 3, OH, OW};
      Tensor y = empty(out, kFloat32, cpu), yd = empty(out, kFloat64, cpu);
      Tensor i = full(out, -1, kInt32, cpu), id = full(out, -1, kInt32, cpu);
      backend.max_pool2d_forward(x, y, i, p);
      backend.max_pool2d_forward(xd, yd, id, p);
      const std::vector<float> got = y.to_vector<float>();
      const std::vector<double> want = yd.to_vector<double>();
      ASSERT_EQ(i.to_vector<int32_t>(), id.to_vector<int32_t>());
      for (size_t k = 0; k < got.size(); ++k) {
        if (std::isnan(want[k])) ASSERT_TRUE(std::isnan(got[k])) << k;
        else ASSERT_EQ(got[k], static_cast<float>(want[k])) << k;
      }
    }
  }
}

TEST(CpuMaxPool, VectorisedFloat32PicksWhatTheScalarPathPicks) {
  std::mt19937 rng(3);
  expect_vector_path_matches_scalar(Pool2dParams{2, 2, 2, 2, 0, 0, true}, rng);
  expect_vector_path_matches_scalar(Pool2dParams{3, 3, 2, 2, 1, 1, true}, rng);  // ResNet's stem
  expect_vector_path_matches_scalar(Pool2dParams{3, 3, 1, 1, 1, 1, true}, rng);
  expect_vector_path_matches_scalar(Pool2dParams{2, 3, 1, 3, 1, 1, true}, rng);
}

// A scalar reference written here, independent of the backend: PyTorch's rule on one window.
TEST(CpuMaxPool, PaddedWindowsFollowPyTorchsRule) {
  CpuBackend backend(1);
  Device cpu(&backend);
  const float inf = std::numeric_limits<float>::infinity();
  // 1×1×3×3, 3×3 stride 2 pad 1 → 2×2 outputs; the top-left window sees x[0..1][0..1].
  Tensor x = from_vector<float>({-inf, -inf, 5, -inf, -inf, 5, 7, 7, 1}, {1, 1, 3, 3}, cpu);
  Tensor y = empty({1, 1, 2, 2}, kFloat32, cpu), i = full({1, 1, 2, 2}, -1, kInt32, cpu);
  backend.max_pool2d_forward(x, y, i, Pool2dParams{3, 3, 2, 2, 1, 1, true});
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 6, 7}));  // all -inf: first; ties: first
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-inf, 5, 7, 7}));
}

}  // namespace
}  // namespace dp
