// Focused GPU tests of the softmax / log-softmax / cross-entropy kernels (softmax_loss.cu): both
// kernel shapes (a warp per row up to 1024 columns, a block per row past it) and their edges,
// misaligned rows (scalar path), ignore_index, label smoothing, and the device-error path of an
// out-of-range target. Every test skips when no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "runtime/backend/backend.h"
#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"
#include "runtime/tensor/generator.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

using testing::error_of;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const DType kFloatingDtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};
// Row widths around the kernels' edges: one element, one warp + 1, the widest warp row, the
// narrowest block row, and a block row with a scalar tail.
const int64_t kWidths[] = {1, 33, 1024, 1025, 5000};

// Largest |got − want| / (1 + |want|) allowed for results rounded to `dtype` (computed from the
// same rounded inputs as the float64 reference).
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 2e-5;
    case DType::Float16: return 4e-3;
    default: return 3e-2;  // bfloat16
  }
}

class SoftmaxLossCudaTest : public testing::GpuTest {
 protected:
  Backend& gpu_backend() { return gpu_.backend(); }
  Backend& cpu_backend() { return cpu_.backend(); }

  // A contiguous GPU copy of `host`; misaligned: its data starts one element past a 16-byte
  // boundary (so the kernels' vector paths are off for it).
  Tensor on_gpu(const Tensor& host, bool misaligned) {
    if (!misaligned) return host.to(gpu_);
    Tensor buffer = Tensor::empty({host.numel() + 1}, host.dtype(), gpu_);
    Tensor view = buffer.narrow(0, 1, host.numel()).view(host.shape());
    view.copy_(host);
    return view;
  }

  Tensor empty_gpu(const Shape& shape, DType dtype, bool misaligned) {
    if (!misaligned) return Tensor::empty(shape, dtype, gpu_);
    Tensor buffer = Tensor::empty({numel_of(shape) + 1}, dtype, gpu_);
    return buffer.narrow(0, 1, numel_of(shape)).view(shape);
  }

  // Largest |got − want| / (1 + |want|); got on any device and dtype, want float64.
  static double max_error(const Tensor& got, const Tensor& want) {
    const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    EXPECT_EQ(g.size(), w.size());
    double worst = 0;
    for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
      const double e = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
      if (!(e <= worst)) worst = e;  // NaN propagates
    }
    return worst;
  }
};

TEST_F(SoftmaxLossCudaTest, SoftmaxForwardAndBackwardMatchCpuOnEveryPath) {
  for (int64_t N : kWidths) {
    for (int64_t M : {int64_t(1), int64_t(37)}) {
      Generator gen(static_cast<uint64_t>(N * 131 + M));
      const Tensor x32 = rand({M, N}, gen, kFloat32, cpu_, -8, 8);
      const Tensor dy32 = rand({M, N}, gen, kFloat32, cpu_, -1, 1);
      for (DType dtype : kFloatingDtypes) {
        const Tensor x = x32.to(dtype), dy = dy32.to(dtype);
        for (bool log : {false, true}) {
          // Reference: the CPU kernel in float64 from the same rounded inputs.
          Tensor y_ref = Tensor::empty({M, N}, kFloat64, cpu_), dx_ref = Tensor::empty({M, N}, kFloat64, cpu_);
          cpu_backend().softmax_forward(x.to(kFloat64), y_ref, log);
          cpu_backend().softmax_backward(y_ref, dy.to(kFloat64), dx_ref, log);
          for (bool misaligned : {false, true}) {
            const std::string what = std::string(dtype_name(dtype)) + " [" + std::to_string(M) + ", " +
                                     std::to_string(N) + "]" + (log ? " log" : "") +
                                     (misaligned ? " misaligned" : "");
            Tensor y = empty_gpu({M, N}, dtype, misaligned), dx = empty_gpu({M, N}, dtype, misaligned);
            gpu_backend().softmax_forward(on_gpu(x, misaligned), y, log);
            EXPECT_LE(max_error(y, y_ref), tolerance(dtype)) << "forward " << what;
            // Backward from the GPU's own y; the reference's y differs by rounding to dtype.
            gpu_backend().softmax_backward(y, on_gpu(dy, misaligned), dx, log);
            EXPECT_LE(max_error(dx, dx_ref), 4 * tolerance(dtype)) << "backward " << what;
          }
        }
      }
    }
  }
}

TEST_F(SoftmaxLossCudaTest, SoftmaxRowsSumToOneAtLargeMagnitudes) {
  // exp(x − max): no overflow for logits near the float limit.
  for (int64_t N : {int64_t(33), int64_t(5000)}) {
    std::vector<float> values(static_cast<size_t>(2 * N));
    for (size_t i = 0; i < values.size(); ++i) values[i] = 1e30f + static_cast<float>(i % 7) * 1e29f;
    Tensor x = from_vector(values, {2, N}, gpu_), y = Tensor::empty({2, N}, kFloat32, gpu_);
    gpu_backend().softmax_forward(x, y, false);
    const std::vector<float> got = y.to_vector<float>();
    for (int64_t m = 0; m < 2; ++m) {
      double sum = 0;
      for (int64_t j = 0; j < N; ++j) sum += got[static_cast<size_t>(m * N + j)];
      EXPECT_NEAR(sum, 1.0, 1e-4) << "N " << N << ", row " << m;
    }
  }
}

TEST_F(SoftmaxLossCudaTest, CrossEntropyMatchesCpuWithIgnoredRowsAndSmoothing) {
  constexpr int64_t kIgnore = -100;
  const int64_t M = 37;
  for (int64_t C : kWidths) {
    std::vector<int64_t> targets(static_cast<size_t>(M));
    for (int64_t m = 0; m < M; ++m) targets[static_cast<size_t>(m)] = (m * 7919) % C;
    targets[5] = kIgnore;
    targets[M - 1] = C - 1;
    const Tensor target_cpu = from_vector(targets, {M}, cpu_), target_gpu = target_cpu.to(gpu_);
    Generator gen(static_cast<uint64_t>(C));
    const Tensor logits32 = rand({M, C}, gen, kFloat32, cpu_, -6, 6);
    const Tensor dlosses32 = rand({M}, gen, kFloat32, cpu_, -2, 2);
    for (DType dtype : kFloatingDtypes) {
      const Tensor logits = logits32.to(dtype), dlosses = dlosses32.to(dtype);
      for (double smoothing : {0.0, 0.1}) {
        Tensor lp_ref = Tensor::empty({M, C}, kFloat64, cpu_), loss_ref = Tensor::empty({M}, kFloat64, cpu_);
        Tensor dlogits_ref = Tensor::empty({M, C}, kFloat64, cpu_);
        cpu_backend().cross_entropy_forward(logits.to(kFloat64), target_cpu, lp_ref, loss_ref, kIgnore, smoothing);
        cpu_backend().cross_entropy_backward(lp_ref, target_cpu, dlosses.to(kFloat64), dlogits_ref, kIgnore,
                                             smoothing);
        for (bool misaligned : {false, true}) {
          const std::string what = std::string(dtype_name(dtype)) + " C " + std::to_string(C) + " smoothing " +
                                   std::to_string(smoothing) + (misaligned ? " misaligned" : "");
          Tensor lp = empty_gpu({M, C}, dtype, misaligned), loss = Tensor::empty({M}, dtype, gpu_);
          gpu_backend().cross_entropy_forward(on_gpu(logits, misaligned), target_gpu, lp, loss, kIgnore, smoothing);
          EXPECT_LE(max_error(lp, lp_ref), tolerance(dtype)) << "log_probs " << what;
          EXPECT_LE(max_error(loss, loss_ref), tolerance(dtype)) << "losses " << what;
          EXPECT_EQ(loss.to_vector<double>()[5], 0.0) << "ignored row " << what;
          Tensor dlogits = empty_gpu({M, C}, dtype, misaligned);
          gpu_backend().cross_entropy_backward(lp, target_gpu, dlosses.to(gpu_), dlogits, kIgnore, smoothing);
          EXPECT_LE(max_error(dlogits, dlogits_ref), 4 * tolerance(dtype)) << "dlogits " << what;
          const std::vector<double> d = dlogits.to_vector<double>();
          for (int64_t j = 0; j < C; ++j) ASSERT_EQ(d[static_cast<size_t>(5 * C + j)], 0.0) << "ignored row " << what;
        }
      }
    }
  }
}

TEST_F(SoftmaxLossCudaTest, OutOfRangeTargetThrowsAtNextSyncAndIsCleared) {
  for (int64_t C : {int64_t(10), int64_t(5000)}) {  // the warp kernel and the block kernel
    const int64_t M = 6, bad = C + 2;
    const std::string expected = "cross_entropy: target " + std::to_string(bad) + " at row 3 is out of range for " +
                                 std::to_string(C) + " classes";
    Generator gen(3);
    Tensor logits = rand({M, C}, gen, kFloat32, cpu_, -1, 1).to(gpu_);
    Tensor target = from_vector(std::vector<int64_t>{0, 1, 2, bad, 4 % C, 5 % C}, {M}, gpu_);
    Tensor lp = Tensor::empty({M, C}, kFloat32, gpu_), loss = Tensor::empty({M}, kFloat32, gpu_);
    // The kernel cannot throw: the call returns, and the next sync reports.
    EXPECT_EQ(error_of([&] { gpu_backend().cross_entropy_forward(logits, target, lp, loss, -100, 0.0); }), "");
    const std::string message = error_of([&] { gpu_backend().synchronize(); });
    EXPECT_TRUE(contains(message, expected)) << message;
    EXPECT_EQ(error_of([&] { gpu_backend().synchronize(); }), "") << "the error was not cleared";
    const std::vector<float> losses = loss.to_vector<float>();
    for (int64_t m = 0; m < M; ++m) {
      if (m == 3) EXPECT_TRUE(std::isnan(losses[3])) << "C " << C;
      else EXPECT_TRUE(std::isfinite(losses[static_cast<size_t>(m)])) << "C " << C << ", row " << m;
    }

    // Backward: a zero row, the same error at the next copy to the host, then the data.
    Tensor dlogits = Tensor::empty({M, C}, kFloat32, gpu_);
    gpu_backend().cross_entropy_backward(lp, target, ones({M}, kFloat32, gpu_), dlogits, -100, 0.1);
    const std::string backward_message = error_of([&] { dlogits.to_vector<float>(); });
    EXPECT_TRUE(contains(backward_message, expected)) << backward_message;
    const std::vector<float> d = dlogits.to_vector<float>();
    for (int64_t j = 0; j < C; ++j) ASSERT_EQ(d[static_cast<size_t>(3 * C + j)], 0.0f) << "C " << C;
    for (int64_t j = 0; j < C; ++j) ASSERT_TRUE(std::isfinite(d[static_cast<size_t>(2 * C + j)])) << "C " << C;
  }
}

TEST_F(SoftmaxLossCudaTest, NegativeTargetThroughTheOpThrowsAtItem) {
  Generator gen(4);
  Tensor logits = rand({4, 10}, gen, kFloat32, cpu_, -1, 1).to(gpu_);
  Tensor target = from_vector(std::vector<int64_t>{1, -3, 2, -100}, {4}, gpu_);  // -100 is ignore_index
  Tensor loss = cross_entropy(logits, target);
  const std::string message = error_of([&] { loss.item<float>(); });
  EXPECT_TRUE(contains(message, "cross_entropy: target -3 at row 1 is out of range for 10 classes")) << message;
  EXPECT_EQ(error_of([&] { gpu_backend().synchronize(); }), "");
  // A valid batch afterwards works normally.
  Tensor good = from_vector(std::vector<int64_t>{1, 3, 2, -100}, {4}, gpu_);
  EXPECT_TRUE(std::isfinite(cross_entropy(logits, good).item<float>()));
}

// topk_hits (top-5 accuracy, NOTE [ Top-5 accuracy ]) is composed of a gather, pointwise ops and
// a row sum: on the GPU it must count what the CPU counts — ties, NaNs and infinities included —
// in every dtype.
TEST_F(SoftmaxLossCudaTest, TopkHitsOnTheGpuAreTheCpus) {
  Generator gen(6);
  const int64_t N = 256, C = 1000;
  // Rounded to a grid of quarters, so that rows hold ties with the target.
  const Tensor grid = rand({N, C}, gen, kFloat32, cpu_, -4, 4);
  std::vector<float> values = grid.to_vector<float>();
  for (float& v : values) v = std::round(4.0f * v) / 4.0f;
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (size_t n = 0; n < t.size(); ++n) t[n] = static_cast<int64_t>((n * 37) % C);
  // A broken model's rows: a NaN target, a NaN elsewhere, an infinite target, infinities elsewhere.
  values[0 * C + static_cast<size_t>(t[0])] = std::numeric_limits<float>::quiet_NaN();
  values[1 * C + 3] = std::numeric_limits<float>::quiet_NaN();
  values[2 * C + static_cast<size_t>(t[2])] = std::numeric_limits<float>::infinity();
  values[3 * C + 5] = std::numeric_limits<float>::infinity();
  values[3 * C + 6] = -std::numeric_limits<float>::infinity();
  const Tensor logits = from_vector(values, {N, C}, cpu_);
  const Tensor target = from_vector(t, {N}, cpu_);
  for (int64_t k : {1, 5}) {
    const std::vector<float> want = topk_hits(logits, target, k).to_vector<float>();
    for (DType dtype : kFloatingDtypes) {
      const std::vector<float> got = topk_hits(logits.to(dtype).to(gpu_), target.to(gpu_), k).to_vector<float>();
      EXPECT_EQ(got, want) << "k " << k << ", " << dtype_name(dtype);
    }
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
