// CUDA convolution (conv.cpp, cuDNN) against the CPU backend, on what a generic comparison can
// miss: groups with stride, padding and dilation together, the algorithm cache being hit on a
// repeated problem, benchmark (cudnnFind) and heuristic choices agreeing, float32 staying exact
// (FMA, no TF32), 16-bit dtypes, empty batches zeroing the gradients, and the input gradient
// added into dx (beta = 1). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "runtime/autograd/autocast.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/conv_algo_cache.h"
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

// merge_find_runs (host logic, no GPU needed): each (algo, math type) keeps its better time over
// the two Find runs, failures and untimed results last.
struct FakePerf {
  int algo;
  int mathType;
  float time;
  int status;  // 0: success
};

TEST(ConvFindMerge, EachAlgorithmKeepsItsBetterTimeFastestFirst) {
  auto ok = [](const FakePerf& r) { return r.status == 0; };
  const std::vector<FakePerf> first = {
      {3, 0, 2.0f, 0},   // the "slow" first timing of an algorithm (module loading)
      {1, 0, 1.5f, 0},
      {1, 1, 1.4f, 0},   // same algorithm, other math type: a separate result
      {5, 0, -1.0f, 0},  // not timed in the first run
      {7, 0, 0.5f, 9},   // failed in the first run
      {8, 0, 3.0f, 0},
  };
  const std::vector<FakePerf> second = {
      {1, 0, 1.6f, 0}, {3, 0, 1.0f, 0}, {5, 0, 1.2f, 0}, {7, 0, 0.4f, 0}, {8, 0, 2.5f, 9}, {1, 1, -1.0f, 0},
      {9, 0, 0.1f, 0},  // only in the second run: left out
  };
  const std::vector<FakePerf> merged = cuda::merge_find_runs(first, second, ok);
  ASSERT_EQ(merged.size(), first.size());
  const int want_algo[] = {7, 3, 5, 1, 1, 8};
  const int want_math[] = {0, 0, 0, 1, 0, 0};
  const float want_time[] = {0.4f, 1.0f, 1.2f, 1.4f, 1.5f, 3.0f};
  for (size_t i = 0; i < merged.size(); ++i) {
    EXPECT_EQ(merged[i].algo, want_algo[i]) << i;
    EXPECT_EQ(merged[i].mathType, want_math[i]) << i;
    EXPECT_EQ(merged[i].time, want_time[i]) << i;
    EXPECT_EQ(merged[i].status, 0) << i;
  }
  // A result usable in neither run goes last, unchanged.
  const std::vector<FakePerf> never = cuda::merge_find_runs(std::vector<FakePerf>{{4, 0, 1.0f, 9}, {2, 0, 0.9f, 0}},
                                                            std::vector<FakePerf>{{4, 0, -1.0f, 0}}, ok);
  ASSERT_EQ(never.size(), 2u);
  EXPECT_EQ(never[0].algo, 2);
  EXPECT_EQ(never[1].algo, 4);
  EXPECT_EQ(never[1].status, 9);
}

// Output size as the op layer computes it.
int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (k - 1) - 1) / stride + 1;
}

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  Shape y() const {
    return {x[0], w[0], out_size(x[2], w[2], p.stride_h, p.pad_h, p.dilation_h),
            out_size(x[3], w[3], p.stride_w, p.pad_w, p.dilation_w)};
  }
};

// Grouped (2 groups), strided, padded and dilated, with odd sizes.
ConvCase grouped_dilated() {
  ConvCase c{{3, 6, 11, 9}, {4, 3, 3, 2}, {}};
  c.p.stride_h = 2, c.p.stride_w = 1;
  c.p.pad_h = 1, c.p.pad_w = 2;
  c.p.dilation_h = 2, c.p.dilation_w = 1;
  c.p.groups = 2;
  return c;
}

class CudaConvTest : public testing::GpuTest {
 protected:
  // Pseudo-random values in [-1, 1] on a 1/128 grid, float64 on the CPU.
  Tensor values(const Shape& shape, uint32_t seed) {
    std::vector<double> v(static_cast<size_t>(numel_of(shape)));
    uint32_t state = seed * 2654435761u + 1;
    for (double& e : v) {
      state = state * 1664525u + 1013904223u;
      e = static_cast<double>(static_cast<int>((state >> 9) % 257) - 128) / 128.0;
    }
    return from_vector(v, shape, cpu_);
  }

  static void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
    const std::vector<double> g = got.to(kFloat64).to_vector<double>(), w = want.to(kFloat64).to_vector<double>();
    ASSERT_EQ(g.size(), w.size()) << what;
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " element " << i;
  }

  // Forward (with bias), backward input and backward weight (with bias gradient) of `c` on
  // `gpu` against the CPU backend, inputs rounded to `dtype` and the reference in float32/64.
  void check_against_cpu(Device gpu, const ConvCase& c, DType dtype, double tol) {
    const DType ref = dtype == kFloat64 ? kFloat64 : kFloat32;
    const Shape y_shape = c.y();
    const Tensor x = values(c.x, 1).to(dtype).to(ref), w = values(c.w, 2).to(dtype).to(ref);
    const Tensor b = values({c.w[0]}, 3).to(dtype).to(ref), dy = values(y_shape, 4).to(dtype).to(ref);
    Tensor y = Tensor::empty(y_shape, ref, cpu_), dx = Tensor::empty(c.x, ref, cpu_);
    Tensor dw = Tensor::empty(c.w, ref, cpu_), db = Tensor::empty({c.w[0]}, ref, cpu_);
    Backend& cpu = cpu_.backend();
    cpu.conv2d_forward(x, w, b, y, c.p);
    cpu.conv2d_backward_input(dy, w, dx, c.p, false);
    cpu.conv2d_backward_weight(dy, x, dw, db, c.p);

    const Tensor gx = x.to(dtype).to(gpu), gw = w.to(dtype).to(gpu), gb = b.to(dtype).to(gpu);
    const Tensor gdy = dy.to(dtype).to(gpu);
    Tensor gy = full(y_shape, 123.0, dtype, gpu), gdx = full(c.x, 123.0, dtype, gpu);
    Tensor gdw = full(c.w, 123.0, dtype, gpu), gdb = full({c.w[0]}, 123.0, dtype, gpu);
    Backend& be = gpu.backend();
    be.conv2d_forward(gx, gw, gb, gy, c.p);
    be.conv2d_backward_input(gdy, gw, gdx, c.p, false);
    be.conv2d_backward_weight(gdy, gx, gdw, gdb, c.p);
    const std::string name = dtype_name(dtype);
    expect_close(gy, y, tol, name + " y");
    expect_close(gdx, dx, tol, name + " dx");
    expect_close(gdw, dw, tol, name + " dw");
    expect_close(gdb, db, tol, name + " dbias");
  }
};

TEST_F(CudaConvTest, GroupedStridedDilatedConvMatchesCpu) {
  check_against_cpu(gpu_, grouped_dilated(), kFloat64, 1e-12);
  // float32 uses FMA math (no TF32): errors stay at float32 rounding of ~50-term dot products.
  check_against_cpu(gpu_, grouped_dilated(), kFloat32, 2e-5);
  check_against_cpu(gpu_, grouped_dilated(), kFloat16, 2e-2);
  check_against_cpu(gpu_, grouped_dilated(), kBFloat16, 5e-2);
  ConvCase depthwise{{2, 8, 10, 10}, {8, 1, 3, 3}, {}};  // groups == channels
  depthwise.p.pad_h = depthwise.p.pad_w = 1;
  depthwise.p.groups = 8;
  check_against_cpu(gpu_, depthwise, kFloat32, 2e-5);
}

TEST_F(CudaConvTest, AlgorithmCacheIsHitOnTheSecondCall) {
  const ConvCase c{{2, 5, 13, 11}, {7, 5, 3, 3}, {}};  // a shape no other test uses
  const Tensor x = values(c.x, 5).to(gpu_), w = values(c.w, 6).to(gpu_);
  const Tensor xf = x.to(kFloat32), wf = w.to(kFloat32);
  Tensor y = Tensor::empty(c.y(), kFloat32, gpu_);
  const size_t before = static_cast<cuda::CudaBackend&>(gpu_.backend()).conv_algo_cache_size();
  gpu_.backend().conv2d_forward(xf, wf, Tensor(), y, c.p);
  const size_t after_first = static_cast<cuda::CudaBackend&>(gpu_.backend()).conv_algo_cache_size();
  EXPECT_EQ(after_first, before + 1) << "the first call of a new problem searches once";
  gpu_.backend().conv2d_forward(xf, wf, Tensor(), y, c.p);
  EXPECT_EQ(static_cast<cuda::CudaBackend&>(gpu_.backend()).conv_algo_cache_size(), after_first) << "the second call must reuse the cached algorithm";
}

// A view that starts mid-batch (here 2 of 3 images, 715 floats in: 4-byte aligned) is a problem
// of its own for the algorithm cache (the buffers' alignment is in its key, as in PyTorch): an
// algorithm timed on 16-byte-aligned buffers may refuse it. Its result equals an aligned copy's.
TEST_F(CudaConvTest, AViewStartingMidBatchGetsItsOwnAlgorithm) {
  const ConvCase c{{2, 5, 13, 11}, {6, 5, 3, 3}, {}};  // a shape no other test uses
  const Tensor batch = values({3, 5, 13, 11}, 7).to(kFloat32).to(gpu_);
  const Tensor w = values(c.w, 8).to(kFloat32).to(gpu_);
  const Tensor view = batch.narrow(0, 1, 2), aligned = view.contiguous().clone();
  auto& backend = static_cast<cuda::CudaBackend&>(gpu_.backend());
  Tensor y_aligned = Tensor::empty(c.y(), kFloat32, gpu_), y_view = Tensor::empty(c.y(), kFloat32, gpu_);
  const size_t before = backend.conv_algo_cache_size();
  backend.conv2d_forward(aligned, w, Tensor(), y_aligned, c.p);
  EXPECT_EQ(backend.conv_algo_cache_size(), before + 1);
  backend.conv2d_forward(view, w, Tensor(), y_view, c.p);
  EXPECT_EQ(backend.conv_algo_cache_size(), before + 2) << "the misaligned view searched again";
  expect_close(y_view, y_aligned, 1e-5, "y of the view");
}

TEST_F(CudaConvTest, BenchmarkAndHeuristicChoicesAgree) {
  for (bool benchmark : {true, false}) {
    cuda::CudaOptions options;
    options.cudnn_benchmark = benchmark;
    cuda::CudaBackend backend(0, options);  // declared before the tensors: outlives them
    check_against_cpu(backend.device(), grouped_dilated(), kFloat32, 2e-5);
    ConvCase wide{{4, 16, 20, 20}, {32, 16, 3, 3}, {}};  // big enough for Winograd/FFT candidates
    wide.p.pad_h = wide.p.pad_w = 1;
    check_against_cpu(backend.device(), wide, kFloat32, 1e-4);
  }
}

TEST_F(CudaConvTest, EmptyBatchZeroesWeightAndBiasGradients) {
  const ConvCase c{{0, 4, 6, 6}, {3, 4, 3, 3}, {}};
  const Tensor dy = Tensor::empty(c.y(), kFloat32, gpu_), x = Tensor::empty(c.x, kFloat32, gpu_);
  Tensor dw = full(c.w, 7.0, kFloat32, gpu_), db = full({3}, 7.0, kFloat32, gpu_);
  gpu_.backend().conv2d_backward_weight(dy, x, dw, db, c.p);
  for (double v : dw.to(cpu_).to(kFloat64).to_vector<double>()) ASSERT_EQ(v, 0.0);
  for (double v : db.to(cpu_).to(kFloat64).to_vector<double>()) ASSERT_EQ(v, 0.0);
}

// NOTE [ Channels-last weights under autocast ]: a channels-last call takes a channels-last weight
// as it is and writes a channels-last weight gradient; both are what the contiguous weight gives,
// bit for bit (cuDNN gets the same NHWC filter either way, and the contiguous weight's gradient is
// the same NHWC result transposed). A contiguous weight in an NCHW call, and a channels-last one
// there (transposed for cuDNN), agree too.
TEST_F(CudaConvTest, ChannelsLastWeightsGiveTheContiguousWeightsResults) {
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  ConvCase c{{4, 16, 9, 7}, {32, 16, 3, 3}, {}};
  c.p.pad_h = c.p.pad_w = 1;
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    for (MemoryFormat activations : {cl, MemoryFormat::Contiguous}) {
      const Tensor x = values(c.x, 1).to(dtype).to(gpu_).contiguous(activations);
      const Tensor dy = values(c.y(), 4).to(dtype).to(gpu_).contiguous(activations);
      const Tensor w = values(c.w, 2).to(dtype).to(gpu_), w_cl = w.contiguous(cl);
      ASSERT_FALSE(w_cl.is_contiguous());
      Backend& be = gpu_.backend();
      std::vector<std::vector<double>> results[2];
      for (const Tensor& weight : {w, w_cl}) {
        const MemoryFormat wf = weight.is_contiguous() ? MemoryFormat::Contiguous : cl;
        Tensor y = Tensor::empty(c.y(), dtype, gpu_, activations), dx = Tensor::empty(c.x, dtype, gpu_, activations);
        Tensor dw = full(c.w, 123.0, dtype, gpu_).contiguous(wf);  // poisoned: every element is written
        be.conv2d_forward(x, weight, Tensor(), y, c.p);
        be.conv2d_backward_input(dy, weight, dx, c.p, false);
        be.conv2d_backward_weight(dy, x, dw, Tensor(), c.p);
        EXPECT_EQ(dw.is_contiguous(), weight.is_contiguous()) << "dw keeps its format";
        results[weight.is_contiguous() ? 0 : 1] = {y.to(cpu_).to(kFloat64).to_vector<double>(),
                                                   dx.to(cpu_).to(kFloat64).to_vector<double>(),
                                                   dw.to(cpu_).to(kFloat64).to_vector<double>()};
      }
      const char* names[] = {"y", "dx", "dw"};
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(results[1][k], results[0][k]) << dtype_name(dtype) << " " << names[k] << ", activations "
                                                << (activations == cl ? "channels-last" : "NCHW");
    }
  }
}

// Through the op under bf16 autocast: with channels-last activations on a GPU the weight's cast
// is channels-last (no transposes; NOTE [ Channels-last weights under autocast ]), and the float32
// weight still gets a contiguous gradient equal to the NCHW run's.
TEST_F(CudaConvTest, AutocastWithChannelsLastActivationsGivesTheNchwGradients) {
  ConvCase c{{4, 16, 9, 7}, {32, 16, 3, 3}, {}};
  c.p.pad_h = c.p.pad_w = 1;
  std::vector<double> grads[2], outputs[2];
  for (int run = 0; run < 2; ++run) {
    const MemoryFormat format = run == 0 ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
    const Tensor x = values(c.x, 1).to(kFloat32).to(gpu_).contiguous(format);
    Tensor w = values(c.w, 2).to(kFloat32).to(gpu_);
    w.set_requires_grad(true);
    Tensor y;
    {
      AutocastGuard amp(kBFloat16);
      y = conv2d(x, w, Tensor(), c.p);
    }
    EXPECT_EQ(y.dtype(), kBFloat16);
    EXPECT_EQ(y.suggest_memory_format(), format);
    sum(mul(y.to(kFloat32), values(c.y(), 4).to(kFloat32).to(gpu_))).backward();
    ASSERT_TRUE(w.grad().defined());
    EXPECT_EQ(w.grad().dtype(), kFloat32);
    EXPECT_TRUE(w.grad().is_contiguous()) << "the float32 weight's gradient keeps its layout: " << w.grad().str();
    grads[run] = w.grad().to(cpu_).to(kFloat64).to_vector<double>();
    outputs[run] = y.to(cpu_).to(kFloat64).to_vector<double>();
  }
  ASSERT_EQ(outputs[1].size(), outputs[0].size());
  for (size_t i = 0; i < outputs[0].size(); ++i)  // NHWC and NCHW algorithms may differ
    ASSERT_NEAR(outputs[1][i], outputs[0][i], 2e-2 * std::max(1.0, std::abs(outputs[0][i]))) << "y element " << i;
  ASSERT_EQ(grads[1].size(), grads[0].size());
  for (size_t i = 0; i < grads[0].size(); ++i)  // bf16 sums in another order: within bf16 rounding
    ASSERT_NEAR(grads[1][i], grads[0][i], 2e-2 * std::max(1.0, std::abs(grads[0][i]))) << "dw element " << i;
}

// backward_input with accumulate (NOTE [ Summing into a pending gradient ]): cuDNN's beta = 1
// gives dx + the gradient, in every dtype and layout (float64 channels-last on its NCHW detour),
// with Find on and off. Each case's first call is the accumulating one, so its Find (which
// overwrites the output it times on) runs then: it must time on scratch and leave dx's values.
TEST_F(CudaConvTest, BackwardInputAddsIntoDxWithoutFindClobberingIt) {
  ConvCase c{{3, 24, 9, 11}, {40, 24, 3, 3}, {}};  // a shape no other test uses
  c.p.pad_h = c.p.pad_w = 1;
  c.p.stride_h = 2;
  for (bool benchmark : {true, false}) {
    cuda::CudaOptions options;
    options.cudnn_benchmark = benchmark;
    for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        cuda::CudaBackend backend(0, options);  // a fresh algorithm cache: the first call searches
        const Device gpu = backend.device();
        const std::string what = std::string(dtype_name(dtype)) + (benchmark ? ", Find" : ", heuristic") +
                                 (format == MemoryFormat::ChannelsLast ? ", channels-last" : ", NCHW");
        const Tensor w = values(c.w, 2).to(dtype).to(gpu), dy = values(c.y(), 4).to(dtype).to(gpu).contiguous(format);
        const Tensor prior = values(c.x, 7).to(dtype).to(gpu).contiguous(format);
        Tensor summed = Tensor::empty(c.x, dtype, gpu, format);
        summed.copy_(prior);
        backend.conv2d_backward_input(dy, w, summed, c.p, true);
        Tensor fresh = full(c.x, 123.0, dtype, gpu).contiguous(format);
        backend.conv2d_backward_input(dy, w, fresh, c.p, false);
        EXPECT_TRUE(summed.is_contiguous(format)) << what;
        const std::vector<double> s = summed.to(cpu_).to(kFloat64).to_vector<double>();
        const std::vector<double> f = fresh.to(cpu_).to(kFloat64).to_vector<double>();
        const std::vector<double> p = prior.to(cpu_).to(kFloat64).to_vector<double>();
        // float32 blending and one rounding against two: within a unit of the dtype's last place.
        const double rel = dtype == kFloat64 ? 1e-13 : dtype == kFloat32 ? 1e-6 : dtype == kFloat16 ? 2e-3 : 1.6e-2;
        for (size_t i = 0; i < s.size(); ++i)
          ASSERT_NEAR(s[i], p[i] + f[i], rel * (std::abs(p[i]) + std::abs(f[i])) + 1e-6)
              << what << ", element " << i << " (prior " << p[i] << ", gradient " << f[i] << ")";
      }
    }
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
