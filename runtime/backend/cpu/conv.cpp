// 2-D convolution on the CPU: im2col + GEMM over chunks of images.
//
// NOTE [ Conv chunking ]
// A chunk's column matrix holds several images side by side, [Cg·KH·KW, images·OH·OW], so one
// GEMM covers them all: with small feature maps (ResNet's deep layers: 4×4, 2×2, 1×1) a GEMM
// per image would be a matrix-vector product that streams the whole weight from memory once per
// image. Chunks are sized for at least kMinColumns columns and at most kMaxColBytes of columns
// (cache-sized). With at least as many chunks as threads, threads take whole chunks and run
// single-threaded BLAS (OpenBLAS does inside a parallel region); otherwise chunks run one after
// another and BLAS threads each GEMM. A one-image chunk of a 1×1 stride-1 unpadded convolution
// uses the input itself as the column matrix and writes the output in place.
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

// col [Cg*KH*KW, OH*OW] (row stride ld) from one group of one image x [Cg, H, W].
template <typename T>
void im2col(const T* x, const ConvShape& s, T* col, int64_t ld) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.Cg; ++c) {
    for (int64_t kh = 0; kh < s.KH; ++kh) {
      for (int64_t kw = 0; kw < s.KW; ++kw) {
        T* row = col + ((c * s.KH + kh) * s.KW + kw) * ld;
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

// dx [Cg, H, W] += scatter of col [Cg*KH*KW, OH*OW] (row stride ld), the adjoint of im2col.
template <typename T>
void col2im(const T* col, const ConvShape& s, T* dx, int64_t ld) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.Cg; ++c) {
    for (int64_t kh = 0; kh < s.KH; ++kh) {
      for (int64_t kw = 0; kw < s.KW; ++kw) {
        const T* row = col + ((c * s.KH + kh) * s.KW + kw) * ld;
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

// Per-thread scratch that grows as needed and is reused across calls (no allocation per chunk).
template <typename T, int Slot>
T* scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

constexpr int64_t kMinColumns = 256;
constexpr int64_t kMaxColBytes = int64_t(4) << 20;

// How images are grouped into chunks and chunks into threads (NOTE [ Conv chunking ]).
struct ChunkPlan {
  int64_t images_per_chunk, chunks;
  bool parallel_chunks;  // threads take whole chunks (single-threaded BLAS)
  int threads;

  ChunkPlan(const ConvShape& s, size_t elem, int num_threads) {
    const int64_t col_bytes = std::max<int64_t>(s.col_rows * s.spatial * static_cast<int64_t>(elem), 1);
    int64_t per = (kMinColumns + s.spatial - 1) / s.spatial;
    per = std::min(per, std::max<int64_t>(1, kMaxColBytes / col_bytes));
    images_per_chunk = std::clamp<int64_t>(per, 1, std::max<int64_t>(s.N, 1));
    chunks = (s.N + images_per_chunk - 1) / images_per_chunk;
    parallel_chunks = chunks >= num_threads;
    threads = parallel_chunks ? static_cast<int>(std::min<int64_t>(num_threads, chunks)) : 1;
  }
  int64_t first(int64_t c) const { return c * images_per_chunk; }
  int64_t count(int64_t c, int64_t N) const { return std::min(images_per_chunk, N - first(c)); }
};

// Runs body(chunk) for every chunk, in parallel over chunks when the plan says so.
template <typename Body>
void for_each_chunk(const ChunkPlan& plan, Body&& body) {
  if (plan.parallel_chunks && plan.threads > 1) {
#pragma omp parallel for num_threads(plan.threads) schedule(static)
    for (int64_t c = 0; c < plan.chunks; ++c) body(c);
  } else {
    for (int64_t c = 0; c < plan.chunks; ++c) body(c);
  }
}

// Columns of `nb` images starting at n0 for group g: col [Cg*KH*KW, nb*OH*OW].
template <typename T>
void chunk_columns(const T* xp, const ConvShape& s, int64_t n0, int64_t nb, int64_t g, T* col) {
  const int64_t ld = nb * s.spatial;
  for (int64_t b = 0; b < nb; ++b) {
    const T* xg = xp + ((n0 + b) * s.C + g * s.Cg) * s.H * s.W;
    if (s.direct()) {
      for (int64_t r = 0; r < s.Cg; ++r) std::memcpy(col + r * ld + b * s.spatial, xg + r * s.spatial, s.spatial * sizeof(T));
    } else {
      im2col(xg, s, col + b * s.spatial, ld);
    }
  }
}

// [Kg, nb*OH*OW] ↔ the group's rows of nb images of t [N, K, OH, OW].
template <typename T>
void gather_group(const T* tp, const ConvShape& s, int64_t n0, int64_t nb, int64_t g, T* out) {
  const int64_t ld = nb * s.spatial;
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t k = 0; k < s.Kg; ++k)
      std::memcpy(out + k * ld + b * s.spatial, tp + ((n0 + b) * s.K + g * s.Kg + k) * s.spatial, s.spatial * sizeof(T));
}

}  // namespace

// x [N, C, H, W], w [K, C/g, KH, KW], bias [K] (optional) → y [N, K, OH, OW]
void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                                const Conv2dParams& p) {
  const ConvShape s(x, w, y, p);
  dispatch_floating(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const T *xp = x.data<T>(), *wp = w.data<T>(), *bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
    const ChunkPlan plan(s, sizeof(T), num_threads_);
    for_each_chunk(plan, [&](int64_t c) {
      const int64_t n0 = plan.first(c), nb = plan.count(c, s.N), ld = nb * s.spatial;
      for (int64_t g = 0; g < s.groups; ++g) {
        const T* wg = wp + g * s.Kg * s.col_rows;
        if (nb == 1) {  // the GEMM writes the image's output rows in place, bias pre-filled
          T* yg = yp + (n0 * s.K + g * s.Kg) * s.spatial;
          const T* cols = xp + (n0 * s.C + g * s.Cg) * s.H * s.W;
          if (!s.direct()) {
            T* col = scratch<T, 0>(s.col_rows * ld);
            im2col(cols, s, col, ld);
            cols = col;
          }
          if (bp)
            for (int64_t k = 0; k < s.Kg; ++k) std::fill(yg + k * s.spatial, yg + (k + 1) * s.spatial, bp[g * s.Kg + k]);
          blas_gemm<T>(false, false, s.Kg, s.spatial, s.col_rows, T(1), wg, s.col_rows, cols, s.spatial,
                       bp ? T(1) : T(0), yg, s.spatial);
          continue;
        }
        T* col = scratch<T, 0>(s.col_rows * ld);
        T* out = scratch<T, 1>(s.Kg * ld);
        chunk_columns(xp, s, n0, nb, g, col);
        blas_gemm<T>(false, false, s.Kg, ld, s.col_rows, T(1), wg, s.col_rows, col, ld, T(0), out, ld);
        for (int64_t b = 0; b < nb; ++b) {
          for (int64_t k = 0; k < s.Kg; ++k) {
            const T* src = out + k * ld + b * s.spatial;
            T* dst = yp + ((n0 + b) * s.K + g * s.Kg + k) * s.spatial;
            const T add = bp ? bp[g * s.Kg + k] : T(0);
            for (int64_t i = 0; i < s.spatial; ++i) dst[i] = src[i] + add;
          }
        }
      }
    });
  });
}

// dy [N, K, OH, OW], w [K, C/g, KH, KW] → dx [N, C, H, W]
void CpuBackend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p) {
  const ConvShape s(dx, w, dy, p);
  dispatch_floating(dy.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data<T>(), *wp = w.data<T>();
    T* dxp = dx.data<T>();
    const ChunkPlan plan(s, sizeof(T), num_threads_);
    for_each_chunk(plan, [&](int64_t c) {
      const int64_t n0 = plan.first(c), nb = plan.count(c, s.N), ld = nb * s.spatial;
      const bool in_place = nb == 1 && s.direct();  // dcol is the image's dx itself
      if (!in_place) std::fill(dxp + n0 * s.C * s.H * s.W, dxp + (n0 + nb) * s.C * s.H * s.W, T(0));
      for (int64_t g = 0; g < s.groups; ++g) {
        const T* wg = wp + g * s.Kg * s.col_rows;
        const T* dyg = dyp + (n0 * s.K + g * s.Kg) * s.spatial;
        if (nb > 1) {
          T* gathered = scratch<T, 1>(s.Kg * ld);
          gather_group(dyp, s, n0, nb, g, gathered);
          dyg = gathered;
        }
        // dcol [Cg*KH*KW, nb*OH*OW] = w_gᵀ [Cg*KH*KW, Kg] @ dy_g [Kg, nb*OH*OW]
        T* dcol = in_place ? dxp + (n0 * s.C + g * s.Cg) * s.H * s.W : scratch<T, 0>(s.col_rows * ld);
        blas_gemm<T>(true, false, s.col_rows, ld, s.Kg, T(1), wg, s.col_rows, dyg, ld, T(0), dcol, ld);
        if (in_place) continue;
        for (int64_t b = 0; b < nb; ++b) {
          T* dxg = dxp + ((n0 + b) * s.C + g * s.Cg) * s.H * s.W;
          if (s.direct()) {
            for (int64_t r = 0; r < s.Cg; ++r) {
              const T* src = dcol + r * ld + b * s.spatial;
              T* dst = dxg + r * s.spatial;
              for (int64_t i = 0; i < s.spatial; ++i) dst[i] += src[i];
            }
          } else {
            col2im(dcol + b * s.spatial, s, dxg, ld);
          }
        }
      }
    });
  });
}

// dy [N, K, OH, OW], x [N, C, H, W] → dw [K, C/g, KH, KW] (overwritten), dbias [K] (optional)
void CpuBackend::conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                        const Conv2dParams& p) {
  const ConvShape s(x, dw, dy, p);
  dispatch_floating(dy.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    const T *dyp = dy.data<T>(), *xp = x.data<T>();
    const ChunkPlan plan(s, sizeof(T), num_threads_);
    const int64_t wsize = s.K * s.col_rows;
    // Each thread accumulates its chunks into a private dW (and dbias), summed at the end.
    std::vector<T> partial(static_cast<size_t>(plan.threads) * (wsize + s.K), T(0));
    auto accumulate_chunk = [&](int64_t c, T* dw_t) {
      T* db_t = dw_t + wsize;
      const int64_t n0 = plan.first(c), nb = plan.count(c, s.N), ld = nb * s.spatial;
      for (int64_t g = 0; g < s.groups; ++g) {
        const T* cols = xp + (n0 * s.C + g * s.Cg) * s.H * s.W;
        const T* dyg = dyp + (n0 * s.K + g * s.Kg) * s.spatial;
        if (nb > 1 || !s.direct()) {
          T* col = scratch<T, 0>(s.col_rows * ld);
          chunk_columns(xp, s, n0, nb, g, col);
          cols = col;
        }
        if (nb > 1) {
          T* gathered = scratch<T, 1>(s.Kg * ld);
          gather_group(dyp, s, n0, nb, g, gathered);
          dyg = gathered;
        }
        // dw_g [Kg, Cg*KH*KW] += dy_g [Kg, nb*OH*OW] @ colᵀ [nb*OH*OW, Cg*KH*KW]
        blas_gemm<T>(false, true, s.Kg, s.col_rows, ld, T(1), dyg, ld, cols, ld, T(1), dw_t + g * s.Kg * s.col_rows,
                     s.col_rows);
        if (dbias.defined()) {
          for (int64_t k = 0; k < s.Kg; ++k) {
            const T* row = dyg + k * ld;
            T acc = 0;
            for (int64_t i = 0; i < ld; ++i) acc += row[i];
            db_t[g * s.Kg + k] += acc;
          }
        }
      }
    };
    if (plan.parallel_chunks && plan.threads > 1) {
#pragma omp parallel num_threads(plan.threads)
      {
        T* mine = partial.data() + omp_get_thread_num() * (wsize + s.K);
#pragma omp for schedule(static)
        for (int64_t c = 0; c < plan.chunks; ++c) accumulate_chunk(c, mine);
      }
    } else {
      for (int64_t c = 0; c < plan.chunks; ++c) accumulate_chunk(c, partial.data());
    }
    T* dwp = dw.data<T>();
    T* dbp = dbias.defined() ? dbias.data<T>() : nullptr;
    for (int64_t i = 0; i < wsize; ++i) {
      T acc = 0;
      for (int t = 0; t < plan.threads; ++t) acc += partial[t * (wsize + s.K) + i];
      dwp[i] = acc;
    }
    if (dbp) {
      for (int64_t k = 0; k < s.K; ++k) {
        T acc = 0;
        for (int t = 0; t < plan.threads; ++t) acc += partial[t * (wsize + s.K) + wsize + k];
        dbp[k] = acc;
      }
    }
  });
}

}  // namespace dp
