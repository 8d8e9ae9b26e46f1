// CUDA backend checked against the CPU backend, kernel by kernel. Every GPU test skips (loudly)
// when no GPU is visible; CudaRuntime.ReportsMissingGpuClearly runs everywhere.
#include <gtest/gtest.h>


#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

using testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CudaRuntime, ReportsMissingGpuClearly) {
  Runtime runtime;
  const int count = Runtime::cuda_device_count();
#ifdef DPTRAIN_HAVE_CUDA
  EXPECT_EQ(count, cuda::device_count());
  if (count == 0) {  // this machine: no driver or no device
    const std::string message = error_of([&] { runtime.cuda(0); });
    EXPECT_TRUE(contains(message, "cuda:0") && contains(message, "no CUDA GPU is visible")) << message;
  } else {
    const std::string message = error_of([&] { runtime.cuda(count); });
    EXPECT_TRUE(contains(message, std::to_string(count) + " GPU(s) are visible")) << message;
  }
#else
  EXPECT_EQ(count, 0);
  const std::string message = error_of([&] { runtime.cuda(0); });
  EXPECT_TRUE(contains(message, "built without CUDA")) << message;
#endif
}

#ifdef DPTRAIN_HAVE_CUDA

const DType kAllDtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt8, kBool};

class CudaBackendTest : public testing::GpuTest {
 protected:
  cuda::CudaBackend& gpu_backend() { return static_cast<cuda::CudaBackend&>(gpu_.backend()); }
  Backend& cpu_backend() { return cpu_.backend(); }

  // Raw bytes of t in row-major order (t on either device).
  std::vector<uint8_t> bytes_of(const Tensor& t) {
    Tensor host = t.device().is_cpu() ? t.contiguous() : t.to(cpu_);
    std::vector<uint8_t> out(host.nbytes());
    std::memcpy(out.data(), host.raw_data(), out.size());
    return out;
  }

  // Values 0, 0.25, ..., 100 with a zero every fifth element, as `dtype`, on the CPU: exact or
  // rounded identically by both backends, and in range for every integer dtype.
  Tensor pattern(const Shape& shape, DType dtype) {
    std::vector<double> values(static_cast<size_t>(numel_of(shape)));
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = i % 5 == 0 ? 0.0 : static_cast<double>(i * 37 % 401) * 0.25;
    return from_vector(values, shape, cpu_).to(dtype);
  }
};

TEST_F(CudaBackendTest, RoundTripCopiesKeepEveryDtypeBitExact) {
  for (DType dtype : kAllDtypes) {
    Tensor host = pattern({3, 1001}, dtype);
    Tensor device = host.to(gpu_);
    Tensor device_copy = Tensor::empty(host.shape(), dtype, gpu_);
    gpu_backend().copy_on_device(device_copy.raw_data(), device.raw_data(), device.nbytes());
    EXPECT_EQ(bytes_of(device_copy), bytes_of(host)) << dtype_name(dtype);
  }
}

TEST_F(CudaBackendTest, StridedCopiesAndCastsMatchCpu) {
  // Each view is applied to the same base on both devices.
  using View = Tensor (*)(const Tensor&);
  const View views[] = {
      [](const Tensor& t) { return t.transpose(0, 2); },                                   // [10, 6, 4]
      [](const Tensor& t) { return t.narrow(1, 1, 4).narrow(2, 2, 5); },                   // sliced
      [](const Tensor& t) { return t.select(1, 2).unsqueeze(1).expand({4, 3, 10}); },     // stride 0
      [](const Tensor& t) { return t.permute({1, 2, 0}); },
  };
  for (DType from : kAllDtypes) {
    Tensor base_cpu = pattern({4, 6, 10}, from);
    Tensor base_gpu = base_cpu.to(gpu_);
    for (DType to : kAllDtypes) {
      for (size_t v = 0; v < std::size(views); ++v) {
        Tensor src_cpu = views[v](base_cpu), src_gpu = views[v](base_gpu);
        Tensor dst_cpu = Tensor::empty(src_cpu.shape(), to, cpu_);
        Tensor dst_gpu = Tensor::empty(src_cpu.shape(), to, gpu_);
        cpu_backend().copy(src_cpu, dst_cpu);
        gpu_backend().copy(src_gpu, dst_gpu);
        EXPECT_EQ(bytes_of(dst_gpu), bytes_of(dst_cpu))
            << dtype_name(from) << " → " << dtype_name(to) << ", view " << v;
      }
      // Strided destination: write through a transposed view.
      Tensor dst_cpu = Tensor::empty({10, 6, 4}, to, cpu_), dst_gpu = Tensor::empty({10, 6, 4}, to, gpu_);
      cpu_backend().copy(base_cpu, dst_cpu.transpose(0, 2));
      gpu_backend().copy(base_gpu, dst_gpu.transpose(0, 2));
      EXPECT_EQ(bytes_of(dst_gpu), bytes_of(dst_cpu))
          << dtype_name(from) << " → " << dtype_name(to) << ", strided dst";
    }
  }
}

TEST_F(CudaBackendTest, CopyRejectsMoreThanEightUnmergeableDims) {
  const Shape shape(9, 2);
  Tensor reversed = Tensor::empty(shape, kFloat32, gpu_).permute({8, 7, 6, 5, 4, 3, 2, 1, 0});
  Tensor dst = Tensor::empty(reversed.shape(), kFloat32, gpu_);
  const std::string message = error_of([&] { gpu_backend().copy(reversed, dst); });
  EXPECT_TRUE(contains(message, "copy: the CUDA kernel handles up to 8 dims")) << message;
}

TEST_F(CudaBackendTest, FillAndArangeMatchCpu) {
  for (DType dtype : kAllDtypes) {
    for (double value : {2.5, 0.0, -0.0, 1.0}) {
      Tensor cpu_t = pattern({7, 9}, dtype), gpu_t = cpu_t.to(gpu_);
      cpu_backend().fill(cpu_t.t().narrow(0, 1, 5), value);  // strided
      gpu_backend().fill(gpu_t.t().narrow(0, 1, 5), value);
      EXPECT_EQ(bytes_of(gpu_t), bytes_of(cpu_t)) << dtype_name(dtype) << " strided fill " << value;
      cpu_backend().fill(cpu_t, value);  // contiguous (zero takes the memset path)
      gpu_backend().fill(gpu_t, value);
      EXPECT_EQ(bytes_of(gpu_t), bytes_of(cpu_t)) << dtype_name(dtype) << " fill " << value;
    }
    if (dtype == kBool || dtype == kUInt8) continue;  // negative values would not fit
    Tensor cpu_t = Tensor::empty({1000}, dtype, cpu_), gpu_t = Tensor::empty({1000}, dtype, gpu_);
    cpu_backend().arange(cpu_t, -3.0, 0.5);
    gpu_backend().arange(gpu_t, -3.0, 0.5);
    EXPECT_EQ(bytes_of(gpu_t), bytes_of(cpu_t)) << dtype_name(dtype) << " arange";
  }
}

TEST_F(CudaBackendTest, RandomNumbersEqualCpuForTheSameSeedAndOffset) {
  struct Case { RandomDist dist; double a, b; const char* name; };
  const Case cases[] = {{RandomDist::Uniform, -2.0, 3.0, "uniform"},
                        {RandomDist::Normal, 0.5, 2.0, "normal"},
                        {RandomDist::Bernoulli, 0.3, 0.0, "bernoulli"}};
  const int64_t n = 100003;
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (const Case& c : cases) {
      Tensor cpu_t = Tensor::empty({n}, dtype, cpu_), gpu_t = Tensor::empty({n}, dtype, gpu_);
      cpu_backend().random(cpu_t, c.dist, c.a, c.b, /*seed=*/1234, /*offset=*/77);
      gpu_backend().random(gpu_t, c.dist, c.a, c.b, 1234, 77);
      if (dtype == kFloat64 && c.dist == RandomDist::Normal) {
        // CUDA's log/cos and glibc's may differ in the last bit of a double.
        std::vector<double> want = cpu_t.to_vector<double>(), got = gpu_t.to_vector<double>();
        for (int64_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-14 * std::max(1.0, std::abs(want[i]))) << c.name << " element " << i;
      } else {
        EXPECT_EQ(bytes_of(gpu_t), bytes_of(cpu_t)) << dtype_name(dtype) << " " << c.name;
      }
    }
  }
}

// ---- GEMM ---------------------------------------------------------------------------------------

constexpr int64_t kB = 5, kM = 67, kK = 129, kN = 45;  // odd sizes: no lucky alignment

Tensor as_is(const Tensor& t) { return t; }
Tensor transposed(const Tensor& t) { return t.transpose(t.dim() - 2, t.dim() - 1); }
Tensor broadcast(const Tensor& t) { return t.unsqueeze(0).expand({kB, t.size(0), t.size(1)}); }  // stride 0
Tensor broadcast_transposed(const Tensor& t) { return broadcast(transposed(t)); }

// An operand is a contiguous base and the view taken of it (the same on both devices).
struct Operand {
  Shape base_shape;
  Tensor (*view)(const Tensor&);
};
struct GemmCase {
  const char* name;
  Operand a, b;
};
const GemmCase kGemmCases[] = {
    {"2-D", {{kM, kK}, as_is}, {{kK, kN}, as_is}},
    {"2-D, a transposed", {{kK, kM}, transposed}, {{kK, kN}, as_is}},
    {"2-D, b transposed", {{kM, kK}, as_is}, {{kN, kK}, transposed}},
    {"2-D, both transposed", {{kK, kM}, transposed}, {{kN, kK}, transposed}},
    {"batched", {{kB, kM, kK}, as_is}, {{kB, kK, kN}, as_is}},
    {"batched, both transposed", {{kB, kK, kM}, transposed}, {{kB, kN, kK}, transposed}},
    {"batched, broadcast b", {{kB, kM, kK}, as_is}, {{kK, kN}, broadcast}},
    {"batched, broadcast transposed b", {{kB, kM, kK}, as_is}, {{kN, kK}, broadcast_transposed}},
    {"batched, broadcast a", {{kM, kK}, broadcast}, {{kB, kK, kN}, as_is}},
    {"batched, transposed a, broadcast b", {{kB, kK, kM}, transposed}, {{kK, kN}, broadcast}},
};

class CudaGemmTest : public CudaBackendTest {
 protected:
  // Inputs drawn in [-1, 1) and rounded to `dtype`; the GPU computes in `dtype`, the CPU in
  // float64 from the same rounded values. Returns the largest |gpu - cpu| / (1 + |cpu|).
  double max_error(const GemmCase& c, DType dtype, double alpha, double beta) {
    Generator gen(7);
    Tensor a = rand(c.a.base_shape, gen, kFloat32, cpu_, -1, 1).to(dtype);
    Tensor b = rand(c.b.base_shape, gen, kFloat32, cpu_, -1, 1).to(dtype);
    const Shape c_shape = c.a.view(a).dim() == 3 ? Shape{kB, kM, kN} : Shape{kM, kN};
    Tensor c_init = rand(c_shape, gen, kFloat32, cpu_, -1, 1).to(dtype);
    Tensor c_gpu = c_init.to(gpu_), c_ref = c_init.to(kFloat64).clone();
    gpu_backend().gemm(c.a.view(a.to(gpu_)), c.b.view(b.to(gpu_)), c_gpu, alpha, beta);
    cpu_backend().gemm(c.a.view(a.to(kFloat64)), c.b.view(b.to(kFloat64)), c_ref, alpha, beta);
    const std::vector<double> got = c_gpu.to_vector<double>(), want = c_ref.to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(got[i] - want[i]) / (1 + std::abs(want[i])));
    return worst;
  }
};

TEST_F(CudaGemmTest, MatchesCpuForEveryLayoutAndDtype) {
  // Tolerances relative to 1 + |c| (|c| up to ~10 here): f32/f64 summation order only; the
  // 16-bit types are dominated by rounding the result (half an ulp ≤ 2^-12 |c| and 2^-9 |c|).
  struct Tolerance { DType dtype; double tol; };
  const Tolerance tolerances[] = {{kFloat32, 5e-5}, {kFloat64, 1e-13}, {kFloat16, 1e-3}, {kBFloat16, 4e-3}};
  for (const Tolerance& t : tolerances) {
    for (const GemmCase& c : kGemmCases) {
      for (double beta : {0.0, 0.5}) {
        EXPECT_LE(max_error(c, t.dtype, 1.5, beta), t.tol)
            << dtype_name(t.dtype) << ", " << c.name << ", beta " << beta;
      }
    }
  }
}

TEST_F(CudaGemmTest, Tf32IsOffByDefaultAndCloseWhenEnabled) {
  EXPECT_FALSE(gpu_backend().options().allow_tf32);
  gpu_backend().set_allow_tf32(true);
  // TF32 keeps 10 mantissa bits: ~1e-3 relative per product.
  for (const GemmCase& c : kGemmCases) EXPECT_LE(max_error(c, kFloat32, 1.0, 0.0), 2e-2) << c.name;
  gpu_backend().set_allow_tf32(false);
  EXPECT_LE(max_error(kGemmCases[0], kFloat32, 1.0, 0.0), 1e-5);
}

TEST_F(CudaGemmTest, EmptyInnerDimScalesC) {
  for (double beta : {0.0, 0.5}) {
    Tensor c_cpu = pattern({kM, kN}, kFloat32), c_gpu = c_cpu.to(gpu_);
    for (Device device : {cpu_, gpu_}) {
      Tensor c = device == cpu_ ? c_cpu : c_gpu;
      device.backend().gemm(Tensor::empty({kM, 0}, kFloat32, device), Tensor::empty({0, kN}, kFloat32, device), c,
                            1.0, beta);
    }
    EXPECT_EQ(bytes_of(c_gpu), bytes_of(c_cpu)) << "beta " << beta;
  }
}

// ---- Errors -------------------------------------------------------------------------------------

TEST_F(CudaBackendTest, UnsupportedDtypeNamesKernelDtypesAndDevice) {
  EXPECT_TRUE(gpu_backend().supports(Kernel::Conv2dForward, kBFloat16));
  EXPECT_FALSE(gpu_backend().supports(Kernel::SgdUpdate, kFloat16));
  EXPECT_EQ(error_of([&] { gpu_backend().check_supported(Kernel::SgdUpdate, kFloat16); }),
            "sgd_update: the CUDA kernel supports float32, float64; got float16 (device cuda:0)");
}

TEST_F(CudaBackendTest, OutOfMemoryNamesCallDeviceAndSizeAndIsRecoverable) {
  const size_t huge = size_t(1) << 50;  // 1 PiB
  const std::string message = error_of([&] { gpu_backend().allocate(huge); });
  EXPECT_TRUE(contains(message, "cudaMallocAsync") && contains(message, "failed on cuda:0") &&
              contains(message, "requested 1024.0 TiB"))
      << message;
  // Out of memory is not sticky: the device keeps working.
  Tensor t = pattern({100}, kFloat32);
  EXPECT_EQ(bytes_of(t.to(gpu_)), bytes_of(t));
}

// ---- Memory pool and pinned copies -------------------------------------------------------------

TEST_F(CudaBackendTest, PoolReusesFreedBlocksAndKeepsThem) {
  gpu_backend().synchronize();
  const cuda::PoolStats before = gpu_backend().pool_stats();
  const size_t bytes = size_t(64) << 20;
  for (int i = 0; i < 50; ++i) {
    void* p = gpu_backend().allocate(bytes);
    EXPECT_GE(gpu_backend().pool_stats().used_bytes, before.used_bytes + bytes) << "iteration " << i;
    gpu_backend().deallocate(p, bytes);
  }
  for (int i = 0; i < 20; ++i) Tensor::empty({int64_t(16) << 20}, kFloat32, gpu_);  // 64 MiB, freed at once
  gpu_backend().synchronize();  // a pool with the default threshold would release memory here
  const cuda::PoolStats after = gpu_backend().pool_stats();
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_GE(after.reserved_bytes, bytes) << "freed blocks were returned to the driver";
  // Reused, not grown: at most one new 64 MiB block (plus the pool's 2 MiB granularity).
  EXPECT_LE(after.reserved_bytes, before.reserved_bytes + bytes + (size_t(2) << 20));
}

TEST_F(CudaBackendTest, PinnedCopiesArriveAndEventsComplete) {
  const int64_t n = 1 << 20;
  cuda::PinnedHostBuffer staging(sizeof(float) * (n + 16));
  auto* host = static_cast<float*>(staging.data());
  for (int64_t i = 0; i < n + 16; ++i) host[i] = static_cast<float>(i) * 0.5f;

  Tensor dst = Tensor::empty({n}, kFloat32, gpu_);
  cuda::CudaEvent done =
      gpu_backend().copy_from_pinned_async(dst.raw_data(), staging, 16 * sizeof(float), dst.nbytes());
  done.synchronize();
  EXPECT_TRUE(done.ready());
  std::vector<float> got = dst.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(i + 16) * 0.5f) << "element " << i;

  // The synchronous path also accepts pinned memory (and waits for it).
  gpu_backend().copy_from_host(dst.raw_data(), host, dst.nbytes());
  EXPECT_EQ(dst.to_vector<float>()[3], 1.5f);

  const std::string message = error_of(
      [&] { gpu_backend().copy_from_pinned_async(dst.raw_data(), staging, 32 * sizeof(float), dst.nbytes()); });
  EXPECT_TRUE(contains(message, "outside the pinned buffer")) << message;
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
