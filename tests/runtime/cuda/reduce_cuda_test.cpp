// CUDA reductions (reduce, argmax_rows) against the CPU backend, on what a generic comparison
// would miss: each kernel path (a warp or a block per row, columns, a reduction split across
// blocks and folded from scratch), the per-channel sum over dims {0, 2, 3} of NCHW, a full
// reduction of 10^7 elements, rows starting mid-vector, NaN propagation, empty reductions,
// determinism, and argmax's first-maximum and NaN rules. The CPU reference runs in float64 on
// the same (dtype-rounded) inputs and is rounded to the dtype before comparing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

const DType kFloatingDtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
const ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min};

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Max: return "max";
    default: return "min";
  }
}

// Relative tolerance of a float (double for float64) accumulation rounded once to the dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 1e-5;
    case DType::Float16: return 2e-3;
    default: return 1.6e-2;  // bfloat16
  }
}

class ReduceCudaTest : public testing::GpuTest {
 protected:
  Backend& gpu() { return gpu_.backend(); }
  Backend& cpu() { return cpu_.backend(); }

  // Uniform in [lo, hi), as a CPU tensor in `dtype`.
  Tensor values(const Shape& shape, DType dtype, double lo = -1.0, double hi = 1.0) {
    std::vector<double> v(static_cast<size_t>(numel_of(shape)));
    std::uniform_real_distribution<double> uniform(lo, hi);
    for (double& e : v) e = uniform(rng_);
    return from_vector(v, shape, cpu_).to(dtype);
  }

  // Reduces view(base) over the dims where out_shape is 1 on both devices and compares. Sums
  // are compared to tolerance * (sqrt(reduced elements) + |want|): the accumulation error grows
  // with the number of terms, not with their (cancelling) sum.
  void check_reduce(ReduceOp op, const Tensor& base, const std::function<Tensor(const Tensor&)>& view,
                    const Shape& out_shape, const std::string& what) {
    const DType dtype = base.dtype();
    const Tensor x_gpu = view(base.to(gpu_)), x_ref = view(base.to(kFloat64));
    const Tensor out_gpu = Tensor::empty(out_shape, dtype, gpu_);
    const Tensor out_ref = Tensor::empty(out_shape, kFloat64, cpu_);
    gpu().reduce(op, x_gpu, out_gpu);
    cpu().reduce(op, x_ref, out_ref);
    const double reduced =
        static_cast<double>(x_ref.numel()) / static_cast<double>(std::max<int64_t>(out_ref.numel(), 1));
    const double scale = op == ReduceOp::Sum ? 1.0 + std::sqrt(reduced) : 1.0;
    expect_matches(out_gpu, out_ref, dtype, std::string(reduce_name(op)) + " " + what, scale);
  }

  void expect_matches(const Tensor& got, const Tensor& want, DType dtype, const std::string& what, double scale) {
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const std::vector<double> g = got.to_vector<double>();
    const std::vector<double> w = want.to(dtype).to_vector<double>();
    const double tol = tolerance(dtype);
    for (size_t i = 0; i < g.size(); ++i) {
      bool ok;
      if (std::isnan(w[i])) ok = std::isnan(g[i]);
      else if (std::isinf(w[i])) ok = g[i] == w[i];
      else ok = std::abs(g[i] - w[i]) <= tol * (scale + std::abs(w[i]));
      if (!ok) {
        ADD_FAILURE() << what << " (" << dtype_name(dtype) << "): element " << i << " is " << g[i] << ", want "
                      << w[i];
        return;
      }
    }
  }

  std::mt19937_64 rng_{977};
};

Tensor as_is(const Tensor& t) { return t; }

TEST_F(ReduceCudaTest, PerChannelSumOverNchwDims023) {
  // The bias gradient of a convolution: out [1, C, 1, 1]. The large case splits each channel's
  // 200704 elements across blocks and folds the partials.
  for (DType dtype : kFloatingDtypes) {
    for (const Shape& shape : {Shape{8, 24, 17, 19}, Shape{64, 16, 56, 56}, Shape{3, 5, 1, 1}}) {
      const Tensor x = values(shape, dtype);
      for (ReduceOp op : kReduceOps)
        check_reduce(op, x, as_is, {1, shape[1], 1, 1}, "over {0, 2, 3} of " + shape_str(shape));
    }
    // The same on a channels-last layout (C innermost in memory): the columns kernel.
    const Tensor nhwc = values({16, 28, 28, 40}, dtype);
    for (ReduceOp op : kReduceOps)
      check_reduce(op, nhwc, [](const Tensor& t) { return t.permute({0, 3, 1, 2}); }, {1, 40, 1, 1},
                   "over {0, 2, 3} of channels-last");
  }
}

TEST_F(ReduceCudaTest, FullReductionOfTenMillionElements) {
  const int64_t n = 10'000'000;
  for (DType dtype : kFloatingDtypes) {
    // Positive values: a float sum of 5e6 accumulated naively would be off by far more than 1e-5.
    Tensor x = values({n}, dtype, 0.0, 1.0);
    x.narrow(0, n - 1, 1).fill_(3.0);     // the maximum, last
    x.narrow(0, 1234567, 1).fill_(-2.0);  // the minimum
    for (ReduceOp op : kReduceOps) {
      if (op == ReduceOp::Sum && (dtype == kFloat16 || dtype == kBFloat16)) continue;  // 5e6 overflows / rounds away
      check_reduce(op, x, as_is, {1}, "of 10^7 elements");
    }
    // Deterministic: the split depends on the problem only.
    const Tensor x_gpu = x.to(gpu_);
    const Tensor first = Tensor::empty({1}, dtype, gpu_), second = Tensor::empty({1}, dtype, gpu_);
    gpu().reduce(ReduceOp::Mean, x_gpu, first);
    gpu().reduce(ReduceOp::Mean, x_gpu, second);
    EXPECT_EQ(first.to_vector<double>(), second.to_vector<double>()) << dtype_name(dtype);
  }
  // 2-D views reduced to [1, 1]: a strided (sliced) one takes the general offset path.
  const Tensor wide = values({4000, 2501}, kFloat32);
  check_reduce(ReduceOp::Sum, wide, [](const Tensor& t) { return t.narrow(1, 1, 2500); }, {1, 1}, "sliced 2-D");
  check_reduce(ReduceOp::Sum, wide, [](const Tensor& t) { return t.t(); }, {1, 1}, "transposed 2-D");
}

TEST_F(ReduceCudaTest, RowsStartingMidVectorWithWarpAndBlockPerRow) {
  // Rows of x[:, 1:1+R]: each row starts at a different 16-byte phase. R <= 4096: a warp per
  // row; longer: a block per row; 20000 with 37 rows also splits each row across blocks.
  for (DType dtype : kFloatingDtypes) {
    for (int64_t R : {int64_t(1), int64_t(5), int64_t(1000), int64_t(4096), int64_t(4097), int64_t(20000)}) {
      const Tensor base = values({37, R + 3}, dtype);
      for (ReduceOp op : kReduceOps)
        check_reduce(op, base, [R](const Tensor& t) { return t.narrow(1, 1, R); }, {37, 1},
                     "rows of " + std::to_string(R));
    }
  }
}

TEST_F(ReduceCudaTest, ColumnsAndMiddleDims) {
  for (DType dtype : kFloatingDtypes) {
    struct Case { Shape shape; Shape out; const char* name; };
    const Case cases[] = {
        {{3000, 300}, {1, 300}, "dim 0 of [3000, 300] (split)"},
        {{17, 1000}, {1, 1000}, "dim 0 of [17, 1000]"},
        {{100000, 5}, {1, 5}, "dim 0 of [100000, 5] (few outputs: strided rows)"},
        {{6, 50, 7}, {6, 1, 7}, "dim 1 of [6, 50, 7]"},
        {{6, 50, 7}, {1, 50, 1}, "dims {0, 2} of [6, 50, 7]"},
        {{4, 1, 5}, {4, 1, 5}, "nothing reduced"},
    };
    for (const Case& c : cases) {
      const Tensor x = values(c.shape, dtype);
      for (ReduceOp op : kReduceOps) check_reduce(op, x, as_is, c.out, c.name);
    }
    // A permuted input: [7, 6, 50] viewed from [6, 50, 7], reduced over its dims {0, 2}.
    const Tensor x = values({6, 50, 7}, dtype);
    for (ReduceOp op : kReduceOps)
      check_reduce(op, x, [](const Tensor& t) { return t.permute({2, 0, 1}); }, {1, 6, 1}, "permuted");
  }
}

TEST_F(ReduceCudaTest, MaxAndMinPropagateNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kFloatingDtypes) {
    for (int64_t cols : {int64_t(300), int64_t(9000)}) {
      Tensor x = values({5, cols}, kFloat64);
      x.narrow(0, 1, 1).narrow(1, 17, 1).fill_(nan);
      x.narrow(0, 3, 1).narrow(1, 0, 1).fill_(nan);
      x = x.to(dtype);
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum}) {
        check_reduce(op, x, as_is, {5, 1}, "rows with NaN");
        check_reduce(op, x, as_is, {1, cols}, "columns with NaN");
        check_reduce(op, x, as_is, {1, 1}, "all with NaN");
      }
    }
  }
}

TEST_F(ReduceCudaTest, EmptyReductionGivesTheCpuResult) {
  for (DType dtype : kFloatingDtypes) {
    for (ReduceOp op : kReduceOps) {
      check_reduce(op, Tensor::empty({3, 0}, dtype, cpu_), as_is, {3, 1}, "of [3, 0] over dim 1");
      check_reduce(op, Tensor::empty({0, 4}, dtype, cpu_), as_is, {1, 4}, "of [0, 4] over dim 0");
      check_reduce(op, Tensor::empty({0}, dtype, cpu_), as_is, {1}, "of [0]");
    }
    // Nothing to write.
    gpu().reduce(ReduceOp::Sum, Tensor::empty({0, 4}, dtype, gpu_), Tensor::empty({0, 1}, dtype, gpu_));
  }
}

TEST_F(ReduceCudaTest, ArgmaxRowsFirstMaximumAndNaNRule) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kFloatingDtypes) {
    for (int64_t cols : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(1025), int64_t(5000)}) {
      // Few distinct values: many ties, so "first maximum" matters.
      std::vector<double> v(static_cast<size_t>(33 * cols));
      std::uniform_int_distribution<int> level(-8, 8);
      for (double& e : v) e = level(rng_) * 0.5;
      Tensor x = from_vector(v, {33, cols}, cpu_);
      if (cols >= 7) {
        x.narrow(0, 1, 1).narrow(1, 0, 1).fill_(nan);         // NaN first: the answer is 0
        x.narrow(0, 2, 1).narrow(1, 3, 1).fill_(nan);         // NaN later: skipped
        x.narrow(0, 4, 1).fill_(nan);                         // all NaN: 0
        x.narrow(0, 5, 1).fill_(1.0);                         // all equal: 0
        x.narrow(0, 6, 1).narrow(1, cols - 1, 1).fill_(100);  // the last one
        x.narrow(0, 7, 1).narrow(1, 2, 1).fill_(100);         // a tie: the first of the two
        x.narrow(0, 7, 1).narrow(1, cols - 2, 1).fill_(100);
      }
      x = x.to(dtype);
      const Tensor out_gpu = Tensor::empty({33}, kInt64, gpu_), out_ref = Tensor::empty({33}, kInt64, cpu_);
      gpu().argmax_rows(x.to(gpu_), out_gpu);
      cpu().argmax_rows(x.to(kFloat64), out_ref);
      EXPECT_EQ(out_gpu.to_vector<int64_t>(), out_ref.to_vector<int64_t>())
          << dtype_name(dtype) << " cols " << cols;
    }
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
