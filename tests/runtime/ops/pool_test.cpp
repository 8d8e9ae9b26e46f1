// max/avg/adaptive-average pooling: finite-difference gradients in float64, PyTorch fixtures
// (outputs, gradients and max-pool indices), and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/pool.h"

namespace dp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

Pool2dParams pool_params(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                         bool count_include_pad = true) {
  return Pool2dParams{kh, kw, sh, sw, ph, pw, count_include_pad};
}
Pool2dParams square(int64_t k, int64_t s, int64_t p) { return pool_params(k, k, s, s, p, p); }

using PoolFn = std::function<Tensor(const std::vector<Tensor>&)>;

class Pool2dTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor in(const Shape& s) { return random_input(s, gen, cpu); }
  // A random permutation of distinct values: max pooling has no ties, so its gradient is unique.
  Tensor distinct(const Shape& s) {
    std::vector<double> v(numel_of(s));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) / v.size();
    std::shuffle(v.begin(), v.end(), std::mt19937(7));
    return from_vector<double>(v, s, cpu).set_requires_grad(true);
  }
};

PoolFn max_pool(Pool2dParams p) {
  return [p](const std::vector<Tensor>& v) { return max_pool2d(v[0], p); };
}
PoolFn avg_pool(Pool2dParams p) {
  return [p](const std::vector<Tensor>& v) { return avg_pool2d(v[0], p); };
}
PoolFn adaptive_pool(int64_t oh, int64_t ow) {
  return [oh, ow](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], oh, ow); };
}

TEST_F(Pool2dTest, MaxPoolGradients) {
  EXPECT_GRADCHECK(gradcheck(max_pool(square(2, 2, 0)), {distinct({2, 3, 6, 6})}));
  EXPECT_GRADCHECK(gradcheck(max_pool(square(2, 2, 0)), {distinct({2, 2, 7, 5})}));  // odd: last row/column dropped
  EXPECT_GRADCHECK(gradcheck(max_pool(square(3, 2, 1)), {distinct({2, 2, 7, 5})}));
  EXPECT_GRADCHECK(gradcheck(max_pool(pool_params(3, 2, 2, 1, 1, 0)), {distinct({2, 2, 6, 5})}));
  EXPECT_GRADCHECK(gradcheck(max_pool(square(2, 2, 0)), {noncontiguous_copy(distinct({2, 3, 4, 4}))}));
}

TEST_F(Pool2dTest, AvgPoolGradients) {
  EXPECT_GRADCHECK(gradcheck(avg_pool(square(3, 2, 1)), {in({2, 3, 7, 6})}));
  EXPECT_GRADCHECK(gradcheck(avg_pool(pool_params(3, 3, 2, 2, 1, 1, false)), {in({2, 3, 7, 6})}));
  EXPECT_GRADCHECK(gradcheck(avg_pool(pool_params(2, 3, 1, 2, 1, 1)), {in({2, 2, 5, 6})}));
  EXPECT_GRADCHECK(gradcheck(avg_pool(square(3, 2, 1)), {noncontiguous_copy(in({2, 3, 6, 6}))}));
}

TEST_F(Pool2dTest, AdaptiveAvgPoolGradients) {
  EXPECT_GRADCHECK(gradcheck(adaptive_pool(1, 1), {in({2, 3, 5, 7})}));
  EXPECT_GRADCHECK(gradcheck(adaptive_pool(2, 3), {in({2, 3, 5, 7})}));
  EXPECT_GRADCHECK(gradcheck(adaptive_pool(4, 5), {in({2, 2, 3, 4})}));  // larger than the input: windows overlap
  EXPECT_GRADCHECK(gradcheck(adaptive_pool(2, 3), {noncontiguous_copy(in({2, 3, 5, 7}))}));
}

TEST_F(Pool2dTest, AdaptiveAvgPoolWindows) {
  // 5 → 2: windows [0, 3) and [2, 5) (floor(i·5/2) to ceil((i+1)·5/2)), overlapping in row 2.
  Tensor x = from_vector<double>({0, 1, 2, 3, 4}, {1, 1, 5, 1}, cpu);
  EXPECT_TENSOR_NEAR("y", adaptive_avg_pool2d(x, 2, 1), from_vector<double>({1, 3}, {1, 1, 2, 1}, cpu), 1e-15);
}

TEST_F(Pool2dTest, MatchesPyTorch) {
  for (const char* name : {"max_pool2d_k2s2", "max_pool2d_k3s2p1", "avg_pool2d_k3s2p1", "adaptive_avg_pool2d_1x1",
                           "adaptive_avg_pool2d_2x3"}) {
    SCOPED_TRACE(name);
    const testing::Fixture f(name);
    Tensor x = f.tensor("x", cpu).set_requires_grad(true);
    Tensor expected = f.tensor("out", cpu);
    Tensor y;
    const std::string op = f.option("op");
    if (op == "adaptive_avg_pool2d") {
      auto [oh, ow] = f.option_pair("output_size");
      y = adaptive_avg_pool2d(x, oh, ow);
    } else {
      auto [kh, kw] = f.option_pair("kernel_size");
      auto [sh, sw] = f.option_pair("stride");
      auto [ph, pw] = f.option_pair("padding");
      if (op == "max_pool2d") {
        Tensor indices;
        std::tie(y, indices) = max_pool2d_with_indices(x, pool_params(kh, kw, sh, sw, ph, pw));
        EXPECT_EQ(indices.dtype(), kInt32);
        EXPECT_TENSOR_NEAR("indices", indices, f.tensor("indices", cpu), 0.0);
      } else {
        ASSERT_EQ(f.option("count_include_pad"), "true");
        y = avg_pool2d(x, pool_params(kh, kw, sh, sw, ph, pw, true));
      }
    }
    EXPECT_TENSOR_NEAR("out", y, expected, 1e-12);
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), 1e-12);
  }
}

TEST_F(Pool2dTest, Float32MaxPoolMatchesFloat64) {
  // The 2×2 stride-2 fast path and the general path, in both dtypes, on a batch both threads share.
  for (Pool2dParams p : {square(2, 2, 0), square(3, 2, 1)}) {
    Tensor x64 = distinct({8, 16, 10, 10}).detach(), x32 = x64.to(kFloat32);
    auto [y64, i64] = max_pool2d_with_indices(x64, p);
    auto [y32, i32] = max_pool2d_with_indices(x32, p);
    EXPECT_TENSOR_NEAR("indices", i32, i64, 0.0);
    EXPECT_TENSOR_NEAR("y", y32, y64, 1e-7);
  }
}

TEST_F(Pool2dTest, ClearErrors) {
  auto z = [&](const Shape& s) { return zeros(s, kFloat32, cpu); };
  EXPECT_ERROR_CONTAINS(max_pool2d(z({3, 5, 5}), square(2, 2, 0)), "max_pool2d: expected a 4-D input");
  EXPECT_ERROR_CONTAINS(max_pool2d(z({2, 3, 1, 1}), square(2, 2, 0)), "smaller than the kernel");
  EXPECT_ERROR_CONTAINS(max_pool2d(z({2, 3, 4, 4}), square(2, 2, 2)), "at most half the kernel");
  EXPECT_ERROR_CONTAINS(avg_pool2d(z({2, 3, 4, 4}), square(2, 0, 0)), "avg_pool2d: kernel and stride must be");
  EXPECT_ERROR_CONTAINS(adaptive_avg_pool2d(z({2, 3, 4, 4}), 0, 1), "output size must be ≥ 1, got 0x1");
  EXPECT_ERROR_CONTAINS(adaptive_avg_pool2d(z({4, 4}), 1, 1), "adaptive_avg_pool2d: expected a 4-D input");
}

}  // namespace
}  // namespace dp
