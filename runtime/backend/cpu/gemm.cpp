// GEMM through oneDNN, OpenBLAS (cblas) or Eigen, row-major. Transposed operands are passed as
// transposes, never copied.
//
// NOTE [ CPU float32 GEMM on oneDNN ]
// oneDNN's sgemm (its JIT AVX-512 kernels; Debian's libdnnl, already here for bfloat16 and
// convolutions) runs a transformer's GEMMs — thin [tokens, 128..512] products, their weight
// gradients, the MLM decoder's [predictions, vocabulary] — 1.2 to 2.7 times as fast as OpenBLAS
// 0.3.21 on the Zen 5 VM (bench/RESULTS.md, "CPU float32 GEMM"). So by default (CpuGemm::OneDnn;
// DPTRAIN_CPU_GEMM=openblas or eigen chooses another) it takes float32 products of at least
// kOneDnnMinMacs multiply-adds; OpenBLAS keeps smaller ones (its small-matrix kernels are quicker
// there: attention's per-head products of short sequences) and float64 (oneDNN has no dgemm).
// Called inside a parallel region (one product per thread) oneDNN runs on the calling thread;
// outside, on num_threads. Which library computes a product depends only on its shape, so runs
// stay bit-repeatable for a fixed thread count.
// Signals: oneDNN 2.6's sgemm runs its kernels on a small stack of its own on the heap (valgrind:
// "client switching stacks? SP change ... --> <heap>"), so a signal handled on a thread inside it
// writes its frame (several KB of AVX-512 state) into the heap below that stack. With a recording
// handler on every thread, 2 of 25 two-rank runs signalled with SIGTERM aborted with glibc's
// "corrupted size vs. prev_size" in a free() inside dnnl_sgemm. dptrain therefore takes its stop
// signals on one thread, blocked in every computing thread (NOTE [ Signals on one thread ] in
// launch/stop_signals.h): 0 aborts in 60 such runs since. A program embedding this runtime that
// handles signals must do the same, or choose DPTRAIN_CPU_GEMM=openblas.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <Eigen/Core>

#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/compute_operands.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/omp_threads_scope.h"

namespace dp {

using namespace cpu;

namespace {

struct MatrixLayout {
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// A [rows, cols] operand with a unit stride in one of its last two dims.
MatrixLayout layout_of(const Tensor& t) {
  const int64_t n = t.dim();
  const int64_t rows = t.shape()[n - 2], cols = t.shape()[n - 1];
  const int64_t rs = t.strides()[n - 2], cs = t.strides()[n - 1];
  if (cs == 1 || cols == 1) return {CblasNoTrans, std::max<int64_t>({rs, cols, 1})};
  DP_ASSERT(rs == 1 || rows == 1);
  return {CblasTrans, std::max<int64_t>({cs, rows, 1})};
}

template <typename T>
void eigen_gemm(const MatrixLayout& la, const MatrixLayout& lb, int64_t M, int64_t N, int64_t K, T alpha,
                const T* a, const T* b, T beta, T* c) {
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<RowMajor, 0, Stride> cm(c, M, N, Stride(N));
  // An operand stored transposed is, read row-major, a column-major matrix of the logical shape.
  auto with_a = [&](auto&& am) {
    auto with_b = [&](auto&& bm) {
      if (beta == T(0)) {
        cm.noalias() = alpha * am * bm;
      } else {
        cm *= beta;
        cm.noalias() += alpha * am * bm;
      }
    };
    if (lb.trans == CblasNoTrans) with_b(Eigen::Map<const RowMajor, 0, Stride>(b, K, N, Stride(lb.ld)));
    else with_b(Eigen::Map<const ColMajor, 0, Stride>(b, K, N, Stride(lb.ld)));
  };
  if (la.trans == CblasNoTrans) with_a(Eigen::Map<const RowMajor, 0, Stride>(a, M, K, Stride(la.ld)));
  else with_a(Eigen::Map<const ColMajor, 0, Stride>(a, M, K, Stride(la.ld)));
}

template <typename T>
void openblas_gemm(const MatrixLayout& la, const MatrixLayout& lb, int64_t M, int64_t N, int64_t K, T alpha,
              const T* a, const T* b, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, la.trans, lb.trans, M, N, K, alpha, a, la.ld, b, lb.ld, beta, c, N);
  } else {
    cblas_dgemm(CblasRowMajor, la.trans, lb.trans, M, N, K, alpha, a, la.ld, b, lb.ld, beta, c, N);
  }
}

constexpr int64_t kOneDnnMinMacs = int64_t(1) << 18;

// oneDNN for float32 products of kOneDnnMinMacs or more, else OpenBLAS. Returns oneDNN's status
// (never throws: it may run inside a parallel region).
template <typename T>
dnnl_status_t onednn_gemm(const MatrixLayout& la, const MatrixLayout& lb, int64_t M, int64_t N, int64_t K, T alpha,
                          const T* a, const T* b, T beta, T* c) {
  if constexpr (std::is_same_v<T, float>) {
    if (M * N * K >= kOneDnnMinMacs)
      return dnnl_sgemm(la.trans == CblasTrans ? 'T' : 'N', lb.trans == CblasTrans ? 'T' : 'N', M, N, K, alpha, a,
                        la.ld, b, lb.ld, beta, c, N);
  }
  openblas_gemm(la, lb, M, N, K, alpha, a, b, beta, c);
  return dnnl_success;
}

// Many small products: one per thread (the library then runs single-threaded inside the
// parallel region); otherwise the library threads each product.
bool one_product_per_thread(int64_t batch, int64_t M, int64_t N, int64_t K, int threads) {
  return batch >= 2 * threads && M * N * K < (int64_t(1) << 21);
}

}  // namespace

CpuGemm gemm_from_environment() {
  const char* v = std::getenv("DPTRAIN_CPU_GEMM");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "onednn") == 0 || std::strcmp(v, "dnnl") == 0)
    return CpuGemm::OneDnn;
  if (std::strcmp(v, "openblas") == 0) return CpuGemm::OpenBlas;
  if (std::strcmp(v, "eigen") == 0) return CpuGemm::Eigen;
  throw Error(detail::concat("DPTRAIN_CPU_GEMM must be openblas, onednn or eigen, not '", v, "'"));
}

// NOTE [ CPU float16/bfloat16 GEMM and convolution ]
// bfloat16 runs natively on CPUs with AVX-512 BF16, through oneDNN (NOTE [ CPU bfloat16 GEMM ]
// in bf16_gemm.h): products of bfloat16 pairs accumulated in float32, rounded once to the output.
// float16 (no native CPU kernel short of AVX512-FP16/AMX) and bfloat16 elsewhere are computed in
// float32: the operands are converted exactly (every float16 and bfloat16 value is a float32),
// the float32 kernel multiplies and accumulates in float32, and the result is rounded once.
// Numerically both are a low-precision GEMM with float32 accumulation, as cuBLAS computes it
// (only the summation order differs); in speed the conversion path is float32 plus conversions.
void CpuBackend::bf16_batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
  const int64_t nd = c.dim();
  const int64_t batch = nd == 3 ? c.shape()[0] : 1;
  const MatrixLayout la = layout_of(a), lb = layout_of(b);
  Bf16GemmArgs g;
  g.ta = la.trans == CblasTrans, g.tb = lb.trans == CblasTrans;
  g.M = c.shape()[nd - 2], g.N = c.shape()[nd - 1], g.K = a.shape()[nd - 1];
  g.lda = la.ld, g.ldb = lb.ld, g.ldc = g.N;
  g.alpha = static_cast<float>(alpha), g.beta = static_cast<float>(beta);
  const int64_t sa = nd == 3 ? a.strides()[0] : 0, sb = nd == 3 ? b.strides()[0] : 0;
  const auto *ap = a.data<Eigen::bfloat16>(), *bp = b.data<Eigen::bfloat16>();
  auto* cp = c.data<Eigen::bfloat16>();
  auto product = [&](int64_t i, int threads) {
    Bf16GemmArgs gi = g;
    gi.A = ap + i * sa, gi.B = bp + i * sb;
    bf16_gemm(gi, cp + i * g.M * g.N, threads);
  };
  if (one_product_per_thread(batch, g.M, g.N, g.K, num_threads_)) {
#pragma omp parallel for num_threads(num_threads_) schedule(static)
    for (int64_t i = 0; i < batch; ++i) product(i, 1);
  } else {
    for (int64_t i = 0; i < batch; ++i) product(i, num_threads_);
  }
}

void CpuBackend::gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
  DP_ASSERT(c.is_contiguous() && a.dim() == c.dim() && b.dim() == c.dim());
  DP_ASSERT(a.dtype() == c.dtype() && b.dtype() == c.dtype());
  if (c.dtype() == kBFloat16 && bf16_gemm_available() && c.numel() > 0 && a.shape().back() > 0) {
    bf16_batched_gemm(a, b, c, alpha, beta);
    return;
  }
  if (is_low_precision(c.dtype())) {
    ComputeOperands f32(kFloat32, c.device());
    const Tensor c32 = f32.out(c, beta != 0.0);
    gemm(f32.in(a), f32.in(b), c32, alpha, beta);
    f32.finish();
    return;
  }
  const int64_t nd = c.dim();
  const int64_t M = c.shape()[nd - 2], N = c.shape()[nd - 1], K = a.shape()[nd - 1];
  const int64_t batch = nd == 3 ? c.shape()[0] : 1;
  if (M == 0 || N == 0) return;
  MatrixLayout la = layout_of(a), lb = layout_of(b);
  dispatch_floating(c.dtype(), "gemm", [&](auto tag) {
    using T = decltype(tag);
    const T *ap = a.data<T>(), *bp = b.data<T>();
    T* cp = c.data<T>();
    const int64_t sa = nd == 3 ? a.strides()[0] : 0, sb = nd == 3 ? b.strides()[0] : 0;
    if (K == 0) {  // empty inner dim: c = beta * c
      for (int64_t i = 0; i < c.numel(); ++i) cp[i] = beta == 0.0 ? T(0) : static_cast<T>(beta) * cp[i];
      return;
    }
    const bool batch_parallel = one_product_per_thread(batch, M, N, K, num_threads_);
    if (gemm_ == CpuGemm::Eigen) Eigen::setNbThreads(batch_parallel ? 1 : num_threads_);
    std::atomic<int> failure{dnnl_success};  // the first oneDNN error, raised after the loop
    auto product = [&](int64_t i) {
      const T* ai = ap + i * sa;
      const T* bi = bp + i * sb;
      T* ci = cp + i * M * N;
      const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
      switch (gemm_) {
        case CpuGemm::Eigen: eigen_gemm(la, lb, M, N, K, al, ai, bi, be, ci); break;
        case CpuGemm::OpenBlas: openblas_gemm(la, lb, M, N, K, al, ai, bi, be, ci); break;
        case CpuGemm::OneDnn: {
          const dnnl_status_t status = onednn_gemm(la, lb, M, N, K, al, ai, bi, be, ci);
          int expected = dnnl_success;
          if (status != dnnl_success) failure.compare_exchange_strong(expected, status);
          break;
        }
      }
    };
    if (batch_parallel) {
#pragma omp parallel for num_threads(num_threads_) schedule(static)
      for (int64_t i = 0; i < batch; ++i) product(i);
    } else {
      // Not inside even an inactive `omp parallel ... if(false)`: BLAS's own region would then be
      // nested, and libgomp starts fresh threads for every nested team instead of reusing its pool.
      const OmpThreadsScope team(num_threads_);  // oneDNN's team
      for (int64_t i = 0; i < batch; ++i) product(i);
    }
    DP_CHECK(failure.load() == dnnl_success, "gemm: oneDNN's sgemm failed with status ", failure.load(), " on [", M,
             ", ", K, "] x [", K, ", ", N, "]", batch > 1 ? " (batched)" : "");
  });
}

}  // namespace dp
