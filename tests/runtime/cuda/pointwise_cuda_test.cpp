// CUDA pointwise kernels (unary, unary_backward, binary, binary_scalar, axpby) against the CPU
// backend, on what a generic comparison would miss: vector-path tails (sizes around the 16-byte
// vector width), views starting mid-vector (narrow() offsets) that must take the scalar path,
// broadcast and permuted operands, NaN handling of Maximum/Minimum/Equal, in-place
// binary_scalar, and axpby's beta == 0 overwrite of NaN. The CPU reference runs in float64 on
// the same (dtype-rounded) inputs and is rounded to the dtype before comparing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
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
const UnaryOp kUnaryOps[] = {UnaryOp::Neg,  UnaryOp::Exp,        UnaryOp::Log,  UnaryOp::Sqrt, UnaryOp::Rsqrt,
                             UnaryOp::Abs,  UnaryOp::Square,     UnaryOp::Reciprocal, UnaryOp::Relu,
                             UnaryOp::Gelu, UnaryOp::Tanh,       UnaryOp::Sigmoid, UnaryOp::Silu};
const BinaryOp kBinaryOps[] = {BinaryOp::Add,     BinaryOp::Sub,     BinaryOp::Mul, BinaryOp::Div,
                               BinaryOp::Maximum, BinaryOp::Minimum, BinaryOp::Pow, BinaryOp::Equal};

// Relative tolerance (to 1 + |want|) of a result computed in float (double for float64) and
// rounded once to the dtype, against a float64 reference rounded to the dtype.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 1e-5;
    case DType::Float16: return 2e-3;
    default: return 1.6e-2;  // bfloat16
  }
}

struct Fill {
  double lo = -2.0, hi = 2.0;
  int zero_every = 0;      // element i is 0 when i % zero_every == 0
  int nan_every = 0;       // element i is NaN when i % nan_every == nan_phase
  int nan_phase = 0;
  bool away_from_zero = false;  // |value| in [0.25, hi), alternating sign
};

class PointwiseCudaTest : public testing::GpuTest {
 protected:
  Backend& gpu() { return gpu_.backend(); }
  Backend& cpu() { return cpu_.backend(); }

  // A CPU tensor in `dtype` with values drawn as `fill` says.
  Tensor values(const Shape& shape, DType dtype, const Fill& fill) {
    std::vector<double> v(static_cast<size_t>(numel_of(shape)));
    std::uniform_real_distribution<double> uniform(fill.lo, fill.hi), magnitude(0.25, fill.hi);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = fill.away_from_zero ? (i % 2 ? -1.0 : 1.0) * magnitude(rng_) : uniform(rng_);
      if (fill.zero_every > 0 && i % fill.zero_every == 0) v[i] = 0.0;
      if (fill.nan_every > 0 && static_cast<int>(i % fill.nan_every) == fill.nan_phase)
        v[i] = std::numeric_limits<double>::quiet_NaN();
    }
    return from_vector(v, shape, cpu_).to(dtype);
  }

  // got (any device, `dtype`) equals want (float64 reference, rounded here to `dtype`): NaN
  // where want is NaN, equal infinities, else within tolerance(dtype) * (scale + |want|).
  void expect_matches(const Tensor& got, const Tensor& want, DType dtype, const std::string& what,
                      double scale = 1.0) {
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
        return;  // one report per comparison
      }
    }
  }

  std::mt19937_64 rng_{20240611};
};

Fill unary_fill(UnaryOp op) {
  Fill f;
  f.zero_every = 7;  // relu(0), abs(0), ...
  if (op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt || op == UnaryOp::Reciprocal) {
    f.lo = 0.1;
    f.hi = 3.0;
    f.zero_every = 0;
  }
  return f;
}

std::string describe(const char* what, int64_t n, int64_t offset) {
  std::ostringstream s;
  s << what << " n=" << n << " offset=" << offset;
  return s.str();
}

// Sizes around the vector widths (4 floats, 2 doubles, 8 halves) and past one block.
const int64_t kTailSizes[] = {1, 3, 7, 8, 9, 33, 4099};

TEST_F(PointwiseCudaTest, UnaryHandlesTailsAndMisalignedViews) {
  for (DType dtype : kFloatingDtypes) {
    for (UnaryOp op : kUnaryOps) {
      for (int64_t n : kTailSizes) {
        for (int64_t offset : {0, 1, 3}) {
          const Tensor base = values({n + 4}, dtype, unary_fill(op));
          const Tensor x_gpu = base.to(gpu_).narrow(0, offset, n);
          const Tensor x_ref = base.to(kFloat64).narrow(0, offset, n);
          // The output also starts mid-vector for offset 3 (a contiguous narrow() view).
          const Tensor y_gpu = Tensor::empty({n + 2}, dtype, gpu_).narrow(0, offset == 3 ? 1 : 0, n);
          const Tensor y_ref = Tensor::empty({n}, kFloat64, cpu_);
          gpu().unary(op, x_gpu, y_gpu);
          cpu().unary(op, x_ref, y_ref);
          expect_matches(y_gpu, y_ref, dtype, describe(unary_op_name(op), n, offset));
        }
      }
    }
  }
}

TEST_F(PointwiseCudaTest, UnaryOnStridedAndBroadcastViews) {
  using View = Tensor (*)(const Tensor&);
  const View views[] = {
      [](const Tensor& t) { return t.transpose(0, 2); },                            // [9, 35, 6]
      [](const Tensor& t) { return t.narrow(1, 2, 30).narrow(2, 1, 7); },           // sliced
      [](const Tensor& t) { return t.select(1, 4).unsqueeze(1).expand({6, 5, 9}); },  // stride 0
      [](const Tensor& t) { return t.permute({1, 2, 0}); },
  };
  for (DType dtype : kFloatingDtypes) {
    for (UnaryOp op : {UnaryOp::Exp, UnaryOp::Gelu, UnaryOp::Relu, UnaryOp::Sqrt}) {
      const Tensor base = values({6, 35, 9}, dtype, unary_fill(op));
      const Tensor base_gpu = base.to(gpu_), base_ref = base.to(kFloat64);
      for (size_t v = 0; v < std::size(views); ++v) {
        const Tensor x_gpu = views[v](base_gpu), x_ref = views[v](base_ref);
        const Tensor y_gpu = Tensor::empty(x_gpu.shape(), dtype, gpu_);
        const Tensor y_ref = Tensor::empty(x_ref.shape(), kFloat64, cpu_);
        gpu().unary(op, x_gpu, y_gpu);
        cpu().unary(op, x_ref, y_ref);
        expect_matches(y_gpu, y_ref, dtype, std::string(unary_op_name(op)) + " view " + std::to_string(v));
      }
    }
  }
}

TEST_F(PointwiseCudaTest, UnaryBackwardMatchesCpuFormulasIncludingZeros) {
  Fill fill;
  fill.zero_every = 5;  // relu'(0) and abs'(0) are 0, as the CPU
  for (DType dtype : kFloatingDtypes) {
    for (UnaryOp op : kUnaryOps) {
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(9), int64_t(4099)}) {
        for (int64_t offset : {0, 1}) {
          const Tensor x = values({n + 1}, dtype, fill), y = values({n + 1}, dtype, fill);
          const Tensor dy = values({n + 1}, dtype, Fill{});
          auto on_gpu = [&](const Tensor& t) { return t.to(gpu_).narrow(0, offset, n); };
          auto on_cpu = [&](const Tensor& t) { return t.to(kFloat64).narrow(0, offset, n); };
          const Tensor dx_gpu = Tensor::empty({n}, dtype, gpu_), dx_ref = Tensor::empty({n}, kFloat64, cpu_);
          gpu().unary_backward(op, on_gpu(x), on_gpu(y), on_gpu(dy), dx_gpu);
          cpu().unary_backward(op, on_cpu(x), on_cpu(y), on_cpu(dy), dx_ref);
          expect_matches(dx_gpu, dx_ref, dtype, describe(unary_op_name(op), n, offset) + " backward");
        }
      }
    }
  }
}

TEST_F(PointwiseCudaTest, BinaryContiguousTailsMisalignmentAndNaN) {
  Fill fa;
  fa.nan_every = 11;
  fa.nan_phase = 3;
  Fill fb;
  fb.away_from_zero = true;  // no overflowing quotients
  fb.nan_every = 13;
  fb.nan_phase = 5;
  struct Offsets { int64_t a, b, out; };
  const Offsets offsets[] = {{0, 0, 0}, {1, 2, 0}, {1, 1, 1}, {0, 0, 1}, {2, 0, 0}};
  for (DType dtype : kFloatingDtypes) {
    for (BinaryOp op : kBinaryOps) {
      for (int64_t n : {int64_t(1), int64_t(5), int64_t(8), int64_t(17), int64_t(4099)}) {
        Tensor a = values({n + 2}, dtype, fa), b = values({n + 2}, dtype, fb);
        // Some equal pairs (Equal's 1), including NaN == NaN (0) at i = 3 + 143k.
        for (int64_t i = 0; i < n + 2; i += 3) b.narrow(0, i, 1).copy_(a.narrow(0, i, 1));
        const Tensor a_gpu = a.to(gpu_), b_gpu = b.to(gpu_), a_ref = a.to(kFloat64), b_ref = b.to(kFloat64);
        for (const Offsets& o : offsets) {
          const Tensor out_gpu = Tensor::empty({n + 1}, dtype, gpu_).narrow(0, o.out, n);
          const Tensor out_ref = Tensor::empty({n}, kFloat64, cpu_);
          gpu().binary(op, a_gpu.narrow(0, o.a, n), b_gpu.narrow(0, o.b, n), out_gpu);
          cpu().binary(op, a_ref.narrow(0, o.a, n), b_ref.narrow(0, o.b, n), out_ref);
          expect_matches(out_gpu, out_ref, dtype,
                         describe(binary_op_name(op), n, o.a) + " b offset " + std::to_string(o.b) +
                             " out offset " + std::to_string(o.out));
        }
      }
    }
  }
}

TEST_F(PointwiseCudaTest, BinaryBroadcastAndStridedOperands) {
  Fill fb;
  fb.away_from_zero = true;
  const Shape shape = {4, 6, 5, 7};
  for (DType dtype : kFloatingDtypes) {
    for (BinaryOp op : kBinaryOps) {
      struct Case {
        const char* name;
        Tensor a, b;  // CPU, in dtype
        Tensor (*view_a)(const Tensor&);
        Tensor (*view_b)(const Tensor&);
      };
      const Case cases[] = {
          {"bias per channel", values(shape, dtype, Fill{}), values({1, 6, 1, 1}, dtype, fb),
           [](const Tensor& t) { return t; }, [](const Tensor& t) { return t.expand({4, 6, 5, 7}); }},
          {"row broadcast", values(shape, dtype, Fill{}), values({7}, dtype, fb), [](const Tensor& t) { return t; },
           [](const Tensor& t) { return t.view({1, 1, 1, 7}).expand({4, 6, 5, 7}); }},
          {"scalar a", values({1}, dtype, Fill{}), values(shape, dtype, fb),
           [](const Tensor& t) { return t.view({1, 1, 1, 1}).expand({4, 6, 5, 7}); },
           [](const Tensor& t) { return t; }},
          {"permuted and sliced", values({7, 5, 6, 4}, dtype, Fill{}), values({4, 6, 5, 9}, dtype, fb),
           [](const Tensor& t) { return t.permute({3, 2, 1, 0}); }, [](const Tensor& t) { return t.narrow(3, 1, 7); }},
      };
      for (const Case& c : cases) {
        const Tensor out_gpu = Tensor::empty(shape, dtype, gpu_), out_ref = Tensor::empty(shape, kFloat64, cpu_);
        gpu().binary(op, c.view_a(c.a.to(gpu_)), c.view_b(c.b.to(gpu_)), out_gpu);
        cpu().binary(op, c.view_a(c.a.to(kFloat64)), c.view_b(c.b.to(kFloat64)), out_ref);
        expect_matches(out_gpu, out_ref, dtype, std::string(binary_op_name(op)) + ", " + c.name);
      }
    }
  }
}

TEST_F(PointwiseCudaTest, BinaryScalarInPlaceAndStrided) {
  Fill fill;
  fill.zero_every = 4;
  for (DType dtype : kFloatingDtypes) {
    for (BinaryOp op : kBinaryOps) {
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(4099)}) {
        for (int64_t offset : {0, 1}) {
          Tensor base = values({n + 1}, dtype, fill);
          base.narrow(0, 0, 1).fill_(1.5);  // Equal finds the scalar (exact in every dtype)
          const double s = op == BinaryOp::Pow ? 2.0 : 1.5;
          // In place, as clip_grad does: out is a itself (a narrow view for offset 1).
          const Tensor inplace = base.to(gpu_).narrow(0, offset, n);
          gpu().binary_scalar(op, inplace, s, inplace);
          const Tensor a_ref = base.to(kFloat64).narrow(0, offset, n);
          const Tensor out_ref = Tensor::empty({n}, kFloat64, cpu_);
          cpu().binary_scalar(op, a_ref, s, out_ref);
          expect_matches(inplace, out_ref, dtype, describe(binary_op_name(op), n, offset) + " in place");
        }
      }
      // Strided input, contiguous output.
      const Tensor base = values({9, 6, 5}, dtype, fill);
      const Tensor out_gpu = Tensor::empty({5, 6, 9}, dtype, gpu_), out_ref = Tensor::empty({5, 6, 9}, kFloat64, cpu_);
      gpu().binary_scalar(op, base.to(gpu_).permute({2, 1, 0}), -0.75, out_gpu);
      cpu().binary_scalar(op, base.to(kFloat64).permute({2, 1, 0}), -0.75, out_ref);
      expect_matches(out_gpu, out_ref, dtype, std::string(binary_op_name(op)) + " strided");
    }
  }
}

TEST_F(PointwiseCudaTest, AxpbyModesAndNaNSafeOverwrite) {
  struct Coefficients { double alpha, beta; };
  for (DType dtype : kFloatingDtypes) {
    for (const Coefficients& c : {Coefficients{2.0, 0.0}, Coefficients{1.0, 1.0}, Coefficients{0.5, -1.5}}) {
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(9), int64_t(4099)}) {
        for (int64_t offset : {0, 1}) {
          const Tensor x = values({n + 1}, dtype, Fill{});
          Fill fy;
          if (c.beta == 0.0) fy.nan_every = 1;  // all NaN: beta == 0 must not read y
          const Tensor y = values({n + 1}, dtype, fy);
          const Tensor y_gpu = y.to(gpu_), y_ref = y.to(kFloat64);
          gpu().axpby(c.alpha, x.to(gpu_).narrow(0, offset, n), c.beta, y_gpu.narrow(0, 1 - offset, n));
          cpu().axpby(c.alpha, x.to(kFloat64).narrow(0, offset, n), c.beta, y_ref.narrow(0, 1 - offset, n));
          expect_matches(y_gpu, y_ref, dtype,
                         describe("axpby", n, offset) + " alpha " + std::to_string(c.alpha) + " beta " +
                             std::to_string(c.beta));
        }
      }
    }
    // x and y the same tensor (y = y + y).
    const Tensor t = values({4099}, dtype, Fill{});
    const Tensor t_gpu = t.to(gpu_), t_ref = t.to(kFloat64);
    gpu().axpby(1.0, t_gpu, 1.0, t_gpu);
    cpu().axpby(1.0, t_ref, 1.0, t_ref);
    expect_matches(t_gpu, t_ref, dtype, "axpby aliased");
  }
}

TEST_F(PointwiseCudaTest, LargeTensorUsesEveryBlockOfTheGridStrideLoop) {
  // More float32 vectors than kMaxBlocks * 256 threads: each thread loops, then a tail of 1.
  const int64_t n = (int64_t(1) << 16) * 256 * 4 + 5;
  for (DType dtype : {kFloat32}) {
    const Tensor x = values({n}, dtype, Fill{});
    const Tensor y_gpu = Tensor::empty({n}, dtype, gpu_), y_ref = Tensor::empty({n}, kFloat64, cpu_);
    gpu().unary(UnaryOp::Neg, x.to(gpu_), y_gpu);
    cpu().unary(UnaryOp::Neg, x.to(kFloat64), y_ref);
    expect_matches(y_gpu, y_ref, dtype, "neg, large");
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
