// Focused GPU tests of the embedding kernels (embedding.cu): the gather's copy units (16-byte
// rows, misaligned rows, odd widths), the sorted deterministic scatter-add (runs spanning many
// tiles, column chunks split between warps and looped within one, padding_idx), bitwise
// repeatability, and the device-error path of an out-of-range index. Every test skips when no
// GPU is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "runtime/backend/backend.h"
#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/embedding.h"
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

class EmbeddingCudaTest : public testing::GpuTest {
 protected:
  Backend& gpu_backend() { return gpu_.backend(); }
  Backend& cpu_backend() { return cpu_.backend(); }

  // Raw bytes of t in row-major order (t on either device).
  std::vector<uint8_t> bytes_of(const Tensor& t) {
    Tensor host = t.device().is_cpu() ? t.contiguous() : t.to(cpu_);
    std::vector<uint8_t> out(host.nbytes());
    if (!out.empty()) std::memcpy(out.data(), host.raw_data(), out.size());
    return out;
  }

  // A contiguous GPU tensor of `shape`; misaligned: its data starts one element past a 16-byte
  // boundary. Filled from `host` when given.
  Tensor gpu_tensor(const Shape& shape, DType dtype, bool misaligned, const Tensor& host = Tensor()) {
    Tensor t;
    if (misaligned) {
      Tensor buffer = Tensor::empty({numel_of(shape) + 1}, dtype, gpu_);
      t = buffer.narrow(0, 1, numel_of(shape)).view(shape);
    } else {
      t = Tensor::empty(shape, dtype, gpu_);
    }
    if (host.defined()) t.copy_(host);
    return t;
  }
};

TEST_F(EmbeddingCudaTest, ForwardCopiesRowsBitExactlyForEveryWidthAndAlignment) {
  const int64_t V = 50, K = 37;
  std::vector<int64_t> idx(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) idx[static_cast<size_t>(k)] = (k * 13) % V;
  idx[4] = idx[9] = 7;  // repeated
  const Tensor indices_cpu = from_vector(idx, {K}, cpu_), indices_gpu = indices_cpu.to(gpu_);
  for (int64_t D : {int64_t(1), int64_t(33), int64_t(1025), int64_t(5000), int64_t(8), int64_t(64)}) {
    Generator gen(static_cast<uint64_t>(D));
    const Tensor weight32 = rand({V, D}, gen, kFloat32, cpu_, -1, 1);
    for (DType dtype : kFloatingDtypes) {
      const Tensor weight = weight32.to(dtype);
      Tensor want = Tensor::empty({K, D}, dtype, cpu_);
      cpu_backend().embedding_forward(weight, indices_cpu, want);
      for (bool misaligned : {false, true}) {
        Tensor out = gpu_tensor({K, D}, dtype, misaligned);
        gpu_backend().embedding_forward(gpu_tensor({V, D}, dtype, misaligned, weight), indices_gpu, out);
        EXPECT_EQ(bytes_of(out), bytes_of(want))
            << dtype_name(dtype) << " D " << D << (misaligned ? " misaligned" : "");
      }
    }
  }
}

// Indices with a hot value (a run over many 64-row tiles), a padding value (when >= 0) and a
// spread of others; K rows.
std::vector<int64_t> skewed_indices(int64_t K, int64_t V, int64_t hot, int64_t padding) {
  std::vector<int64_t> idx(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    int64_t v = (k * 31 + 3) % V;
    if (k % 3 == 0) v = hot;
    if (padding >= 0 && k % 17 == 0) v = padding;
    idx[static_cast<size_t>(k)] = v;
  }
  return idx;
}

TEST_F(EmbeddingCudaTest, BackwardMatchesCpuAndRepeatsBitwise) {
  const int64_t V = 100, K = 5000, kHot = 7, kPadding = 5;
  const std::vector<int64_t> idx = skewed_indices(K, V, kHot, kPadding);
  const Tensor indices_cpu = from_vector(idx, {K}, cpu_), indices_gpu = indices_cpu.to(gpu_);
  for (int64_t D : {int64_t(1), int64_t(33), int64_t(64), int64_t(1025)}) {
    Generator gen(static_cast<uint64_t>(D) + 11);
    const Tensor dout32 = rand({K, D}, gen, kFloat32, cpu_, -1, 1);
    for (DType dtype : kFloatingDtypes) {
      const Tensor dout = dout32.to(dtype);
      Tensor want = zeros({V, D}, kFloat64, cpu_);
      cpu_backend().embedding_backward(dout.to(kFloat64), indices_cpu, want, kPadding);
      const std::vector<double> w = want.to_vector<double>();
      // Sums of ~1700 terms in acc_t, then one rounding to dtype.
      const double tol = dtype == kFloat64 ? 1e-11 : dtype == kFloat32 ? 1e-4 : dtype == kFloat16 ? 2e-3 : 1.6e-2;
      for (bool misaligned : {false, true}) {
        const std::string what = std::string(dtype_name(dtype)) + " D " + std::to_string(D) +
                                 (misaligned ? " misaligned" : "");
        const Tensor dout_gpu = gpu_tensor({K, D}, dtype, misaligned, dout);
        Tensor first = gpu_tensor({V, D}, dtype, misaligned, zeros({V, D}, dtype, cpu_));
        Tensor second = gpu_tensor({V, D}, dtype, misaligned, zeros({V, D}, dtype, cpu_));
        gpu_backend().embedding_backward(dout_gpu, indices_gpu, first, kPadding);
        gpu_backend().embedding_backward(dout_gpu, indices_gpu, second, kPadding);
        EXPECT_EQ(bytes_of(first), bytes_of(second)) << "not repeatable: " << what;
        const std::vector<double> got = first.to_vector<double>();
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          const double e = std::abs(got[i] - w[i]) / (1 + std::abs(w[i]));
          if (!(e <= worst)) worst = e;
        }
        EXPECT_LE(worst, tol) << what;
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(got[static_cast<size_t>(kPadding * D + d)], 0.0) << "padding row written: " << what;
      }
    }
  }
}

TEST_F(EmbeddingCudaTest, BackwardWithManyTilesLoopsColumnChunksWithinAWarp) {
  // 40000 indices: enough tiles that each warp covers several column chunks itself.
  const int64_t V = 1000, K = 40000, D = 1025;
  const std::vector<int64_t> idx = skewed_indices(K, V, /*hot=*/123, /*padding=*/-1);
  const Tensor indices_cpu = from_vector(idx, {K}, cpu_);
  Generator gen(99);
  const Tensor dout = rand({K, D}, gen, kFloat32, cpu_, -1, 1);
  Tensor want = zeros({V, D}, kFloat64, cpu_);
  cpu_backend().embedding_backward(dout.to(kFloat64), indices_cpu, want, -1);
  const Tensor dout_gpu = dout.to(gpu_), indices_gpu = indices_cpu.to(gpu_);
  Tensor first = zeros({V, D}, kFloat32, gpu_), second = zeros({V, D}, kFloat32, gpu_);
  gpu_backend().embedding_backward(dout_gpu, indices_gpu, first, -1);
  gpu_backend().embedding_backward(dout_gpu, indices_gpu, second, -1);
  EXPECT_EQ(bytes_of(first), bytes_of(second));
  const std::vector<double> got = first.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(got[i] - w[i]) / (1 + std::abs(w[i]));
    if (!(e <= worst)) worst = e;
  }
  EXPECT_LE(worst, 1e-4);
}

TEST_F(EmbeddingCudaTest, OutOfRangeIndexThrowsAtNextSyncAndIsCleared) {
  const int64_t V = 10;
  for (int64_t D : {int64_t(0), int64_t(1), int64_t(33), int64_t(5000)}) {
    Generator gen(5);
    const Tensor weight_cpu = rand({V, D}, gen, kFloat32, cpu_, -1, 1);
    const Tensor weight = weight_cpu.to(gpu_);
    const Tensor indices = from_vector(std::vector<int64_t>{0, 1, 2, 12, 4}, {5}, gpu_);
    Tensor out = Tensor::empty({5, D}, kFloat32, gpu_);
    EXPECT_EQ(error_of([&] { gpu_backend().embedding_forward(weight, indices, out); }), "");
    const std::string message = error_of([&] { gpu_backend().synchronize(); });
    EXPECT_TRUE(contains(message, "embedding: index 12 at position 3 is out of range for a table of 10 rows"))
        << "D " << D << ": " << message;
    EXPECT_EQ(error_of([&] { gpu_backend().synchronize(); }), "") << "the error was not cleared";
    const std::vector<float> got = out.to_vector<float>(), w = weight_cpu.to_vector<float>();
    for (int64_t d = 0; d < D; ++d) {
      ASSERT_EQ(got[static_cast<size_t>(3 * D + d)], 0.0f) << "D " << D;
      ASSERT_EQ(got[static_cast<size_t>(2 * D + d)], w[static_cast<size_t>(2 * D + d)]) << "D " << D;
    }

    // Backward: the bad index is skipped and reported; the others are added.
    const Tensor bad = from_vector(std::vector<int64_t>{2, -1, 2}, {3}, gpu_);
    Tensor dweight = zeros({V, D}, kFloat32, gpu_);
    gpu_backend().embedding_backward(ones({3, D}, kFloat32, gpu_), bad, dweight, -1);
    const std::string backward_message = error_of([&] { gpu_backend().synchronize(); });
    EXPECT_TRUE(contains(backward_message, "embedding: index -1 at position 1 is out of range for a table of 10 rows"))
        << "D " << D << ": " << backward_message;
    const std::vector<float> dw = dweight.to_vector<float>();
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d)
        ASSERT_EQ(dw[static_cast<size_t>(v * D + d)], v == 2 ? 2.0f : 0.0f) << "D " << D << ", row " << v;
  }
}

TEST_F(EmbeddingCudaTest, OutOfRangeIndexThroughTheOpThrowsAtToVector) {
  Generator gen(6);
  const Tensor weight = rand({10, 16}, gen, kFloat32, gpu_, -1, 1);
  const Tensor indices = from_vector(std::vector<int64_t>{3, 10}, {2}, gpu_);
  Tensor out = embedding(indices, weight);
  const std::string message = error_of([&] { out.to_vector<float>(); });
  EXPECT_TRUE(contains(message, "embedding: index 10 at position 1 is out of range for a table of 10 rows"))
      << message;
  EXPECT_EQ(error_of([&] { gpu_backend().synchronize(); }), "");
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
