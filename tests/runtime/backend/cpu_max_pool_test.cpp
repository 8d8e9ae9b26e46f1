// The CPU's 2×2/stride-2 max pooling has a vectorised float32 path (16 windows at once, the
// last block of a row masked). It must pick exactly what the scalar path picks — float64 runs
// the scalar code — ties to the first in scan order, NaN wins, at every row width.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

TEST(CpuMaxPool2x2, VectorisedFloat32PicksWhatTheScalarPathPicks) {
  CpuBackend backend(2);
  Device cpu(&backend);
  std::mt19937 rng(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Pool2dParams p{2, 2, 2, 2, 0, 0, true};
  for (int64_t W : {2, 3, 5, 14, 15, 28, 29, 32, 33, 34, 40, 66}) {
    for (int64_t H : {2, 5, 28}) {
      SCOPED_TRACE("H " + std::to_string(H) + " W " + std::to_string(W));
      const Shape shape{2, 3, H, W};
      std::vector<float> v(static_cast<size_t>(numel_of(shape)));
      // Few distinct values: many ties. A NaN now and then, sometimes two in one window.
      for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 5) - 2);
      for (size_t i = 0; i < v.size(); i += 1 + rng() % 23) v[i] = nan;
      std::vector<double> vd(v.begin(), v.end());
      Tensor x = from_vector<float>(v, shape, cpu), xd = from_vector<double>(vd, shape, cpu);
      const Shape out{2, 3, H / 2, W / 2};
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

}  // namespace
}  // namespace dp
