#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/matmul.h"

namespace dp {
namespace {

// Naive reference: c[m, n] = Σ_k a[m, k] b[k, n], in double.
std::vector<double> reference_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t M,
                                     int64_t K, int64_t N) {
  std::vector<double> c(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) c[m * N + n] += a[m * K + k] * b[k * N + n];
  return c;
}

TEST(CpuGemm, EveryLibraryAgreesWithReferenceForAllLayouts) {
  for (CpuGemm lib : {CpuGemm::OneDnn, CpuGemm::OpenBlas, CpuGemm::Eigen}) {
    for (int threads : {1, 2}) {
      CpuBackend backend(threads, lib);
      Device cpu(&backend);
      Generator gen(3);
      const int64_t M = 37, K = 53, N = 29;
      Tensor a = rand({M, K}, gen, kFloat32, cpu, -1, 1), b = rand({K, N}, gen, kFloat32, cpu, -1, 1);
      std::vector<double> ref = reference_matmul(a.to(kFloat64).to_vector<double>(),
                                                 b.to(kFloat64).to_vector<double>(), M, K, N);
      Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();  // transposed storage
      for (auto [x, y] : {std::pair{a, b}, std::pair{at, b}, std::pair{a, bt}, std::pair{at, bt}}) {
        std::vector<float> c = matmul(x, y).to_vector<float>();
        for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << "element " << i;
      }
      // Batched with a broadcast right operand.
      Tensor a3 = rand({3, M, K}, gen, kFloat64, cpu);
      Tensor c3 = matmul(a3, b.to(kFloat64));
      std::vector<double> a3v = a3.to_vector<double>(), c3v = c3.to_vector<double>();
      std::vector<double> a1(a3v.begin() + M * K, a3v.begin() + 2 * M * K);
      std::vector<double> ref1 = reference_matmul(a1, b.to(kFloat64).to_vector<double>(), M, K, N);
      for (int64_t i = 0; i < M * N; ++i) ASSERT_NEAR(c3v[M * N + i], ref1[i], 1e-12);
    }
  }
}

// Products large enough for oneDNN (NOTE [ CPU float32 GEMM on oneDNN ]): every layout, alone
// (oneDNN's own threads) and batched one per thread (inside a parallel region), and beta = 1
// (linear's fused bias).
TEST(CpuGemm, OneDnnTakesLargeProductsInEveryLayoutAndInsideParallelRegions) {
  const int64_t M = 70, K = 90, N = 65;  // 409,500 multiply-adds: past the 2^18 threshold
  for (int threads : {1, 2}) {
    CpuBackend backend(threads, CpuGemm::OneDnn);
    Device cpu(&backend);
    Generator gen(5);
    Tensor a = rand({M, K}, gen, kFloat32, cpu, -1, 1), b = rand({K, N}, gen, kFloat32, cpu, -1, 1);
    const std::vector<double> bv = b.to(kFloat64).to_vector<double>();
    std::vector<double> ref = reference_matmul(a.to(kFloat64).to_vector<double>(), bv, M, K, N);
    Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();
    for (auto [x, y] : {std::pair{a, b}, std::pair{at, b}, std::pair{a, bt}, std::pair{at, bt}}) {
      std::vector<float> c = matmul(x, y).to_vector<float>();
      for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-4) << "element " << i;
    }
    Tensor a6 = rand({6, M, K}, gen, kFloat32, cpu, -1, 1);
    const std::vector<float> c6 = matmul(a6, b).to_vector<float>();
    const std::vector<double> a6v = a6.to(kFloat64).to_vector<double>();
    for (int64_t i = 0; i < 6; ++i) {
      std::vector<double> ai(a6v.begin() + i * M * K, a6v.begin() + (i + 1) * M * K);
      std::vector<double> refi = reference_matmul(ai, bv, M, K, N);
      for (int64_t j = 0; j < M * N; ++j) ASSERT_NEAR(c6[i * M * N + j], refi[j], 1e-4) << "product " << i;
    }
    Tensor bias = rand({N}, gen, kFloat32, cpu, -1, 1);
    const std::vector<float> y = linear(a, bt.t(), bias).to_vector<float>();  // weight [N, K]
    const std::vector<float> biasv = bias.to_vector<float>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) ASSERT_NEAR(y[m * N + n], ref[m * N + n] + biasv[n], 1e-4);
  }
}

// DPTRAIN_CPU_GEMM picks the library when a backend is made; oneDNN when unset.
TEST(CpuGemm, LibraryFromTheEnvironment) {
  const char* saved = std::getenv("DPTRAIN_CPU_GEMM");
  const std::string restore = saved ? saved : "";
  unsetenv("DPTRAIN_CPU_GEMM");
  EXPECT_EQ(CpuBackend(1).gemm_library(), CpuGemm::OneDnn);
  setenv("DPTRAIN_CPU_GEMM", "openblas", 1);
  EXPECT_EQ(CpuBackend(1).gemm_library(), CpuGemm::OpenBlas);
  EXPECT_EQ(CpuBackend(1, CpuGemm::Eigen).gemm_library(), CpuGemm::Eigen);  // an explicit choice wins
  setenv("DPTRAIN_CPU_GEMM", "mkl", 1);
  EXPECT_THROW(CpuBackend(1), Error);
  unsetenv("DPTRAIN_CPU_GEMM");
  if (saved) setenv("DPTRAIN_CPU_GEMM", restore.c_str(), 1);
}

// Which library computes a product depends only on its shape: the same inputs give the same bits.
TEST(CpuGemm, OneDnnIsBitRepeatable) {
  CpuBackend backend(2, CpuGemm::OneDnn);
  Device cpu(&backend);
  Generator gen(9);
  Tensor a = rand({300, 128}, gen, kFloat32, cpu, -1, 1), w = rand({512, 128}, gen, kFloat32, cpu, -1, 1);
  const std::vector<float> first = linear(a, w, Tensor()).to_vector<float>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(linear(a.clone(), w.clone(), Tensor()).to_vector<float>(), first);
}

}  // namespace
}  // namespace dp
