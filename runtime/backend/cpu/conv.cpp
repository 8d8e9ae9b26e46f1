// 2-D convolution on the CPU: im2col + GEMM per image, images spread over the OpenMP threads
// (each thread runs single-threaded BLAS on its own images, which beats threading each small
// GEMM). 1×1 stride-1 unpadded convolutions use the input directly as the column matrix.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

namespace dp {

using namespace cpu;

namespace {

// Geometry of one convolution, shared by the three kernels.
struct ConvShape {
  int64_t N, C, H, W;       // input
  int64_t K, OH, OW;        // output channels and size
  int64_t KH, KW;
  int64_t groups, Cg, Kg;   // channels per group (in, out)
  int64_t col_rows;         // Cg * KH * KW
  int64_t spatial;          // OH * OW
  Conv2dParams p;

  ConvShape(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& params)
      : N(x.size(0)), C(x.size(1)), H(x.size(2)), W(x.size(3)), K(w.size(0)), OH(y.size(2)), OW(y.size(3)),
        KH(w.size(2)), KW(w.size(3)), groups(params.groups), Cg(C / params.groups), Kg(K / params.groups),
        col_rows(Cg * KH * KW), spatial(OH * OW), p(params) {}

  bool direct() const {  // the input already is the column matrix
    return KH == 1 && KW == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
  }
};

// col [Cg*KH*KW, OH*OW] from one group of one image x [Cg, H, W].
template <typename T>
void im2col(const T* x, const ConvShape& s, T* col) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.Cg; ++c) {
    for (int64_t kh = 0; kh < s.KH; ++kh) {
      for (int64_t kw = 0; kw < s.KW; ++kw) {
        T* row = col + ((c * s.KH + kh) * s.KW + kw) * s.spatial;
        const int64_t dw = kw * p.dilation_w - p.pad_w;
        // Output columns whose input column is inside the image: [ow_lo, ow_hi).
        int64_t ow_lo = 0, ow_hi = s.OW;
        while (ow_lo < s.OW && ow_lo * p.stride_w + dw < 0) ++ow_lo;
        while (ow_hi > ow_lo && (ow_hi - 1) * p.stride_w + dw >= s.W) --ow_hi;
        for (int64_t oh = 0; oh < s.OH; ++oh) {
          T* out = row + oh * s.OW;
          const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
          if (ih < 0 || ih >= s.H) {
            std::fill(out, out + s.OW, T(0));
            continue;
          }
          const T* in = x + (c * s.H + ih) * s.W + dw;
          std::fill(out, out + ow_lo, T(0));
          if (p.stride_w == 1) {
            std::memcpy(out + ow_lo, in + ow_lo, (ow_hi - ow_lo) * sizeof(T));
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] = in[ow * p.stride_w];
          }
          std::fill(out + ow_hi, out + s.OW, T(0));
        }
      }
    }
  }
}

// dx [Cg, H, W] += scatter of col [Cg*KH*KW, OH*OW] (the adjoint of im2col).
template <typename T>
void col2im(const T* col, const ConvShape& s, T* dx) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.Cg; ++c) {
    for (int64_t kh = 0; kh < s.KH; ++kh) {
      for (int64_t kw = 0; kw < s.KW; ++kw) {
        const T* row = col + ((c * s.KH + kh) * s.KW + kw) * s.spatial;
        const int64_t dw = kw * p.dilation_w - p.pad_w;
        int64_t ow_lo = 0, ow_hi = s.OW;
        while (ow_lo < s.OW && ow_lo * p.stride_w + dw < 0) ++ow_lo;
        while (ow_hi > ow_lo && (ow_hi - 1) * p.stride_w + dw >= s.W) --ow_hi;
        for (int64_t oh = 0; oh < s.OH; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
          if (ih < 0 || ih >= s.H) continue;
          const T* in = row + oh * s.OW;
          T* out = dx + (c * s.H + ih) * s.W + dw;
          if (p.stride_w == 1) {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] += in[ow];
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow * p.stride_w] += in[ow];
          }
        }
      }
    }
  }
}

// Row-major C = alpha·op(A)·op(B) + beta·C through cblas, single call.
template <typename T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto a = ta ? CblasTrans : CblasNoTrans, b = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) cblas_sgemm(CblasRowMajor, a, b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else cblas_dgemm(CblasRowMajor, a, b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Per-thread scratch that grows as needed and is reused across calls (no allocation per image).
template <typename T>
T* scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// Threads for a loop over `n` images: no more threads than images.
int image_threads(int threads, int64_t n) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n))); }

}  // namespace

// x [N, C, H, W], w [K, C/g, KH, KW], bias [K] (optional) → y [N, K, OH, OW]
void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                                const Conv2dParams& p) {
  const ConvShape s(x, w, y, p);
  dispatch_floating(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *wp = w.data<T>(), *bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
#pragma omp parallel for num_threads(image_threads(num_threads_, s.N)) schedule(static)
    for (int64_t n = 0; n < s.N; ++n) {
      T* col = s.direct() ? nullptr : scratch<T>(s.col_rows * s.spatial);
      for (int64_t g = 0; g < s.groups; ++g) {
        const T* xg = xp + (n * s.C + g * s.Cg) * s.H * s.W;
        T* yg = yp + (n * s.K + g * s.Kg) * s.spatial;
        const T* cols = xg;
        if (!s.direct()) {
          im2col(xg, s, col);
          cols = col;
        }
        T beta = 0;
        if (bp) {  // start from the bias and accumulate the product onto it
          for (int64_t k = 0; k < s.Kg; ++k) std::fill(yg + k * s.spatial, yg + (k + 1) * s.spatial, bp[g * s.Kg + k]);
          beta = 1;
        }
        blas_gemm<T>(false, false, s.Kg, s.spatial, s.col_rows, T(1), wp + g * s.Kg * s.col_rows, s.col_rows, cols,
                s.spatial, beta, yg, s.spatial);
      }
    }
  });
}

// dy [N, K, OH, OW], w [K, C/g, KH, KW] → dx [N, C, H, W]
void CpuBackend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p) {
  const ConvShape s(dx, w, dy, p);
  dispatch_floating(dy.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data<T>(), *wp = w.data<T>();
    T* dxp = dx.data<T>();
#pragma omp parallel for num_threads(image_threads(num_threads_, s.N)) schedule(static)
    for (int64_t n = 0; n < s.N; ++n) {
      T* dxn = dxp + n * s.C * s.H * s.W;
      T* col = s.direct() ? nullptr : scratch<T>(s.col_rows * s.spatial);
      if (!s.direct()) std::fill(dxn, dxn + s.C * s.H * s.W, T(0));
      for (int64_t g = 0; g < s.groups; ++g) {
        const T* dyg = dyp + (n * s.K + g * s.Kg) * s.spatial;
        T* dxg = dxn + g * s.Cg * s.H * s.W;
        // dcol [Cg*KH*KW, OH*OW] = w_gᵀ [Cg*KH*KW, Kg] @ dy_g [Kg, OH*OW]
        T* dcol = s.direct() ? dxg : col;
        blas_gemm<T>(true, false, s.col_rows, s.spatial, s.Kg, T(1), wp + g * s.Kg * s.col_rows, s.col_rows, dyg,
                s.spatial, T(0), dcol, s.spatial);
        if (!s.direct()) col2im(col, s, dxg);
      }
    }
  });
}

// dy [N, K, OH, OW], x [N, C, H, W] → dw [K, C/g, KH, KW] (overwritten), dbias [K] (optional)
void CpuBackend::conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                        const Conv2dParams& p) {
  const ConvShape s(x, dw, dy, p);
  dispatch_floating(dy.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data<T>(), *xp = x.data<T>();
    const int threads = image_threads(num_threads_, s.N);
    const int64_t wsize = s.K * s.col_rows;
    // Each thread accumulates its images into a private dW (and dbias), summed at the end.
    std::vector<T> partial(static_cast<size_t>(threads) * (wsize + s.K), T(0));
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      T* dw_t = partial.data() + t * (wsize + s.K);
      T* db_t = dw_t + wsize;
      T* col = s.direct() ? nullptr : scratch<T>(s.col_rows * s.spatial);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < s.N; ++n) {
        for (int64_t g = 0; g < s.groups; ++g) {
          const T* xg = xp + (n * s.C + g * s.Cg) * s.H * s.W;
          const T* dyg = dyp + (n * s.K + g * s.Kg) * s.spatial;
          const T* cols = xg;
          if (!s.direct()) {
            im2col(xg, s, col);
            cols = col;
          }
          // dw_g [Kg, Cg*KH*KW] += dy_g [Kg, OH*OW] @ colᵀ [OH*OW, Cg*KH*KW]
          blas_gemm<T>(false, true, s.Kg, s.col_rows, s.spatial, T(1), dyg, s.spatial, cols, s.spatial, T(1),
                  dw_t + g * s.Kg * s.col_rows, s.col_rows);
          if (dbias.defined()) {
            for (int64_t k = 0; k < s.Kg; ++k) {
              const T* row = dyg + k * s.spatial;
              T acc = 0;
              for (int64_t i = 0; i < s.spatial; ++i) acc += row[i];
              db_t[g * s.Kg + k] += acc;
            }
          }
        }
      }
    }
    T* dwp = dw.data<T>();
    T* dbp = dbias.defined() ? dbias.data<T>() : nullptr;
    for (int64_t i = 0; i < wsize; ++i) {
      T acc = 0;
      for (int t = 0; t < threads; ++t) acc += partial[t * (wsize + s.K) + i];
      dwp[i] = acc;
    }
    if (dbp) {
      for (int64_t k = 0; k < s.K; ++k) {
        T acc = 0;
        for (int t = 0; t < threads; ++t) acc += partial[t * (wsize + s.K) + wsize + k];
        dbp[k] = acc;
      }
    }
  });
}

}  // namespace dp
