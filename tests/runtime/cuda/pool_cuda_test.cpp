// CUDA pooling kernels (pool.cu) against the CPU backend, on what a generic comparison can miss:
// ties and overlapping windows in the max-pool backward (one warp per plane, grouped lanes), NaN
// propagation, planes longer than a warp's 32-output chunk, padding divisors, adaptive windows
// that do not divide, 16-bit dtypes, and run-to-run determinism. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
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

class CudaPoolTest : public testing::GpuTest {
 protected:
  // Pseudo-random values in [-2, 2] on a 1/64 grid (exact in every dtype but bfloat16's widest),
  // with runs of equal values when `ties` (plateaus: many windows share their maximum).
  Tensor values(const Shape& shape, uint32_t seed, bool ties = false) {
    std::vector<double> v(static_cast<size_t>(numel_of(shape)));
    uint32_t state = seed * 2654435761u + 1;
    for (size_t i = 0; i < v.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      v[i] = static_cast<double>(static_cast<int>((state >> 9) % 257) - 128) / 64.0;
      if (ties && i % 7 != 0) v[i] = 1.0;
    }
    return from_vector(v, shape, cpu_);
  }

  static std::vector<double> host(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

  static void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
    const std::vector<double> g = host(got), w = host(want);
    ASSERT_EQ(g.size(), w.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i])) {
        ASSERT_TRUE(std::isnan(g[i])) << what << " element " << i;
        continue;
      }
      ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " element " << i;
    }
  }

  static Shape pooled(const Shape& x, const Pool2dParams& p) {
    return {x[0], x[1], (x[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1,
            (x[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1};
  }

  // Max pool forward and backward on both backends; indices must be equal and, for
  // float32/float64, values bit-equal (same scan and summation order). `format`: the layout of
  // every operand on both backends.
  void check_max_pool(const Shape& x_shape, const Pool2dParams& p, DType dtype, bool ties, bool with_nan = false,
                      MemoryFormat format = MemoryFormat::Contiguous) {
    Tensor x64 = values(x_shape, 7, ties);
    if (with_nan) {
      std::vector<double> v = x64.to_vector<double>();
      for (size_t i = 3; i < v.size(); i += 11) v[i] = std::numeric_limits<double>::quiet_NaN();
      x64 = from_vector(v, x_shape, cpu_);
    }
    // The CPU reference runs in float32/float64 on the values rounded to `dtype`.
    const DType cpu_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
    const Tensor x_cpu = x64.to(dtype).to(cpu_dtype).contiguous(format);
    const Shape y_shape = pooled(x_shape, p);
    Tensor y_cpu = Tensor::empty(y_shape, cpu_dtype, cpu_, format), i_cpu = Tensor::empty(y_shape, kInt32, cpu_, format);
    cpu_.backend().max_pool2d_forward(x_cpu, y_cpu, i_cpu, p);
    const Tensor x_gpu = x_cpu.to(dtype).to(gpu_).contiguous(format);
    Tensor y_gpu = Tensor::empty(y_shape, dtype, gpu_, format), i_gpu = Tensor::empty(y_shape, kInt32, gpu_, format);
    ASSERT_TRUE(x_gpu.is_contiguous(format) && y_gpu.is_contiguous(format));
    gpu_.backend().max_pool2d_forward(x_gpu, y_gpu, i_gpu, p);
    EXPECT_EQ(i_gpu.to(cpu_).to_vector<int32_t>(), i_cpu.to_vector<int32_t>()) << dtype_name(dtype);
    expect_close(y_gpu, y_cpu, 0.0, "max_pool2d y");

    const Tensor dy_cpu = values(y_shape, 11).to(dtype).to(cpu_dtype).contiguous(format);
    Tensor dx_cpu = Tensor::empty(x_shape, cpu_dtype, cpu_, format);
    cpu_.backend().max_pool2d_backward(dy_cpu, i_cpu, dx_cpu, p);
    Tensor dx_gpu = full(x_shape, 123.0, dtype, gpu_).contiguous(format);  // poisoned: every element must be written
    const Tensor dy_gpu = dy_cpu.to(dtype).to(gpu_).contiguous(format);
    gpu_.backend().max_pool2d_backward(dy_gpu, i_gpu, dx_gpu, p);
    const bool exact = dtype == kFloat32 || dtype == kFloat64;
    expect_close(dx_gpu, dx_cpu, exact ? 0.0 : 1e-2, "max_pool2d dx");
    // Deterministic: a second run gives the same bits.
    Tensor dx_again = Tensor::empty(x_shape, dtype, gpu_, format);
    gpu_.backend().max_pool2d_backward(dy_gpu, i_gpu, dx_again, p);
    const Tensor a = dx_gpu.to(cpu_), b = dx_again.to(cpu_);
    EXPECT_EQ(0, std::memcmp(a.raw_data(), b.raw_data(), a.nbytes())) << "max_pool2d_backward is not repeatable";
  }
};

const DType kFloating[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

TEST_F(CudaPoolTest, MaxPoolBackwardWithTiesAndOverlappingWindowsMatchesCpu) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 1;  // every input sits in up to 9 windows
  p.pad_h = p.pad_w = 1;
  for (DType dtype : kFloating) check_max_pool({2, 3, 9, 13}, p, dtype, /*ties=*/true);
}

TEST_F(CudaPoolTest, MaxPoolResNetStemAndPlanesPastOneWarpChunk) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  for (DType dtype : kFloating) check_max_pool({3, 5, 67, 45}, p, dtype, /*ties=*/false);  // 34x23 outputs a plane
  Pool2dParams q;  // non-overlapping 2x2 (the fast no-collision path), odd sizes
  q.kernel_h = q.kernel_w = 2;
  q.stride_h = q.stride_w = 2;
  for (DType dtype : kFloating) check_max_pool({2, 33, 17, 9}, q, dtype, /*ties=*/true);
}

// Channels-last with whole vectors of channels takes the vector kernels (kVec<T> channels a
// thread: 8 halves, 4 floats, 2 doubles); 12 channels are whole vectors for float32 and float64
// but not for the half types, which then take the scalar channels-last kernels.
TEST_F(CudaPoolTest, MaxPoolChannelsLastVectorKernelsMatchCpu) {
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  Pool2dParams stem;  // ResNet's
  stem.kernel_h = stem.kernel_w = 3;
  stem.stride_h = stem.stride_w = 2;
  stem.pad_h = stem.pad_w = 1;
  for (DType dtype : kFloating) check_max_pool({3, 64, 15, 11}, stem, dtype, /*ties=*/false, false, cl);
  for (DType dtype : kFloating) check_max_pool({2, 16, 9, 13}, stem, dtype, /*ties=*/true, false, cl);
  Pool2dParams dense;  // every input in up to 9 windows
  dense.kernel_h = dense.kernel_w = 3;
  dense.pad_h = dense.pad_w = 1;
  for (DType dtype : kFloating) check_max_pool({2, 16, 7, 6}, dense, dtype, /*ties=*/true, false, cl);
  for (DType dtype : kFloating) check_max_pool({2, 12, 7, 6}, dense, dtype, /*ties=*/true, false, cl);
  Pool2dParams odd;  // uneven window and stride, padding on one axis
  odd.kernel_h = 3, odd.kernel_w = 2;
  odd.stride_h = 2, odd.stride_w = 1;
  odd.pad_h = 1, odd.pad_w = 0;
  check_max_pool({2, 8, 11, 10}, odd, kFloat32, /*ties=*/true, /*with_nan=*/true, cl);
  check_max_pool({2, 8, 11, 10}, odd, kFloat64, /*ties=*/false, /*with_nan=*/true, cl);
  check_max_pool({2, 8, 11, 10}, odd, kBFloat16, /*ties=*/true, /*with_nan=*/true, cl);
}

TEST_F(CudaPoolTest, MaxPoolPropagatesNaNLikeCpu) {
  Pool2dParams p;
  p.kernel_h = 3, p.kernel_w = 2;
  p.stride_h = 2, p.stride_w = 1;
  p.pad_h = 1, p.pad_w = 1;
  check_max_pool({2, 2, 11, 10}, p, kFloat32, /*ties=*/true, /*with_nan=*/true);
  check_max_pool({2, 2, 11, 10}, p, kFloat64, /*ties=*/false, /*with_nan=*/true);
}

TEST_F(CudaPoolTest, AvgPoolPaddingDivisorsMatchCpu) {
  for (bool include_pad : {true, false}) {
    Pool2dParams p;
    p.kernel_h = 3, p.kernel_w = 4;
    p.stride_h = 2, p.stride_w = 3;
    p.pad_h = 1, p.pad_w = 2;
    p.count_include_pad = include_pad;
    const Shape x_shape{2, 3, 13, 14}, y_shape = pooled(x_shape, p);
    for (DType dtype : kFloating) {
      const DType cpu_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
      const Tensor x_cpu = values(x_shape, 3).to(dtype).to(cpu_dtype);
      const Tensor dy_cpu = values(y_shape, 5).to(dtype).to(cpu_dtype);
      Tensor y_cpu = Tensor::empty(y_shape, cpu_dtype, cpu_), dx_cpu = Tensor::empty(x_shape, cpu_dtype, cpu_);
      cpu_.backend().avg_pool2d_forward(x_cpu, y_cpu, p);
      cpu_.backend().avg_pool2d_backward(dy_cpu, dx_cpu, p);
      Tensor y_gpu = full(y_shape, 123.0, dtype, gpu_), dx_gpu = full(x_shape, 123.0, dtype, gpu_);
      gpu_.backend().avg_pool2d_forward(x_cpu.to(dtype).to(gpu_), y_gpu, p);
      gpu_.backend().avg_pool2d_backward(dy_cpu.to(dtype).to(gpu_), dx_gpu, p);
      const double tol = dtype == kFloat32 ? 1e-6 : dtype == kFloat64 ? 1e-14 : 1e-2;
      expect_close(y_gpu, y_cpu, tol, include_pad ? "avg_pool2d y (include pad)" : "avg_pool2d y");
      expect_close(dx_gpu, dx_cpu, tol, include_pad ? "avg_pool2d dx (include pad)" : "avg_pool2d dx");
    }
  }
}

TEST_F(CudaPoolTest, AdaptiveAvgPoolUnevenWindowsMatchCpu) {
  const Shape cases[][2] = {{{2, 3, 10, 7}, {2, 3, 4, 3}},   // shrinking, windows overlap
                            {{2, 3, 3, 2}, {2, 3, 5, 4}},    // growing: inputs repeat
                            {{1, 4, 7, 7}, {1, 4, 1, 1}}};   // global average
  for (const auto& c : cases) {
    for (DType dtype : kFloating) {
      const DType cpu_dtype = dtype == kFloat64 ? kFloat64 : kFloat32;
      const Tensor x_cpu = values(c[0], 9).to(dtype).to(cpu_dtype);
      const Tensor dy_cpu = values(c[1], 13).to(dtype).to(cpu_dtype);
      Tensor y_cpu = Tensor::empty(c[1], cpu_dtype, cpu_), dx_cpu = Tensor::empty(c[0], cpu_dtype, cpu_);
      cpu_.backend().adaptive_avg_pool2d_forward(x_cpu, y_cpu);
      cpu_.backend().adaptive_avg_pool2d_backward(dy_cpu, dx_cpu);
      Tensor y_gpu = full(c[1], 123.0, dtype, gpu_), dx_gpu = full(c[0], 123.0, dtype, gpu_);
      gpu_.backend().adaptive_avg_pool2d_forward(x_cpu.to(dtype).to(gpu_), y_gpu);
      gpu_.backend().adaptive_avg_pool2d_backward(dy_cpu.to(dtype).to(gpu_), dx_gpu);
      const double tol = dtype == kFloat32 ? 1e-6 : dtype == kFloat64 ? 1e-14 : 1e-2;
      expect_close(y_gpu, y_cpu, tol, "adaptive_avg_pool2d y");
      expect_close(dx_gpu, dx_cpu, tol, "adaptive_avg_pool2d dx");
    }
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
