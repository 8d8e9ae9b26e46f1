// Softmax, log-softmax and fused cross-entropy over the rows of contiguous [M, N] tensors.
// Numerically stable: the row maximum is subtracted before exponentiating; sums of
// exponentials accumulate in double. Rows are split between OpenMP threads; within a row the
// float32 exponentials are vector calls (NOTE [ Vector math from glibc's libmvec ]).
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/vector_math.h"

namespace dp {

using namespace cpu;

namespace {

template <typename T>
T row_max(const T* x, int64_t n) {
  T mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t j = 1; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

// Σ exp(x - mx); also stores the exponentials in `out` when given.
template <typename T>
double sum_exp(const T* x, T mx, int64_t n, T* out) {
  double s = 0;
  if (out) {
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) {
      out[j] = std::exp(x[j] - mx);
      s += static_cast<double>(out[j]);
    }
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(std::exp(x[j] - mx));
  }
  return s;
}

// log Σ exp(x) of one row.
template <typename T>
T log_sum_exp(const T* x, int64_t n) {
  const T mx = row_max(x, n);
  return static_cast<T>(mx + std::log(sum_exp<T>(x, mx, n, nullptr)));
}

// Calls row_fn(m) for m in [0, M), split between `threads` OpenMP threads.
template <typename Fn>
void for_each_row(int64_t M, int threads, Fn&& row_fn) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t m = 0; m < M; ++m) row_fn(m);
}

// Rejects a target outside [0, C) other than ignore_index. A serial scan before the parallel
// loop: an exception cannot leave an OpenMP region.
void check_targets(const int64_t* target, int64_t M, int64_t C, int64_t ignore_index) {
  for (int64_t m = 0; m < M; ++m) {
    const int64_t t = target[m];
    DP_CHECK(t == ignore_index || (t >= 0 && t < C), "cross_entropy: target ", t, " (sample ", m,
             ") is out of range for ", C, " classes; expected a class index in [0, ", C,
             ") or ignore_index (", ignore_index, ")");
  }
}

}  // namespace

// x, y [M, N] contiguous. Softmax is attention's softmax with scale 1 and no mask (one kernel,
// as on CUDA); log-softmax here.
void CpuBackend::softmax_forward(const Tensor& x, const Tensor& y, bool log) {
  DP_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dim() == 2);
  const int64_t M = x.size(0), N = x.size(1);
  if (N == 0) return;
  if (!log) return attention_softmax_forward(x.view({1, M, N}), Tensor(), y.view({1, M, N}), 1.0);
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  dispatch_floating(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for_each_row(M, threads, [&](int64_t m) {
      const T* xr = xp + m * N;
      T* yr = yp + m * N;
      const T lse = log_sum_exp(xr, N);
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) yr[j] = xr[j] - lse;
    });
  });
}

// y (the forward output), dy, dx [M, N] contiguous.
// softmax: dx = y·(dy - Σ dy·y) (attention's backward with scale 1); log_softmax: dx = dy - exp(y)·Σ dy.
void CpuBackend::softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) {
  DP_ASSERT(y.is_contiguous() && dy.is_contiguous() && dx.is_contiguous() && y.dim() == 2);
  if (!log) return attention_softmax_backward(y, dy, dx, 1.0);
  const int64_t M = y.size(0), N = y.size(1);
  const int threads = y.numel() >= kParallelGrain ? num_threads_ : 1;
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* dxp = dx.data<T>();
    for_each_row(M, threads, [&](int64_t m) {
      const T* yr = yp + m * N;
      const T* g = gp + m * N;
      T* out = dxp + m * N;
      double dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j < N; ++j) dot += g[j];
      const T s = static_cast<T>(dot);
#pragma omp simd
      for (int64_t j = 0; j < N; ++j) out[j] = g[j] - std::exp(yr[j]) * s;
    });
  });
}

// Attention's softmax (backend.h): x, y [B, R, N]; mask float32 [Bm, Q, N] or undefined. Each row
// is computed in compute_t<T> (float, or double for float64): in place in y for float32/float64,
// in a per-thread float buffer for float16/bfloat16 (widened on load, rounded once on store).
// With scale 1 and no mask (plain softmax) float32/float64 rows are read straight from x.
void CpuBackend::attention_softmax_forward(const Tensor& x, const Tensor& mask, const Tensor& y, double scale) {
  DP_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dim() == 3);
  const int64_t B = x.size(0), R = x.size(1), N = x.size(2), M = B * R;
  if (M == 0 || N == 0) return;
  const float* mp = mask.defined() ? mask.data<float>() : nullptr;
  const int64_t Q = mask.defined() ? mask.size(1) : 1;
  const bool mask_per_batch = mask.defined() && mask.size(0) > 1;
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  dispatch_floating_and_half(x.dtype(), "attention_softmax_forward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const A s = static_cast<A>(scale);
#pragma omp parallel num_threads(threads)
    {
      std::vector<A> buffer(std::is_same_v<T, A> ? 0 : N);
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; ++m) {
        const T* xr = xp + m * N;
        T* yr = yp + m * N;
        A* v;             // the row's exponentials, then probabilities
        const A* logits;  // scale·x + mask row
        if constexpr (std::is_same_v<T, A>) {
          v = yr;
          logits = xr;
          if (s != A(1) || mp) {
#pragma omp simd
            for (int64_t j = 0; j < N; ++j) v[j] = xr[j] * s;
            logits = v;
          }
        } else {
          v = buffer.data();
          widen(xr, v, N);
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) v[j] *= s;
          logits = v;
        }
        if (mp) {  // logits == v here
          const float* mr = mp + ((mask_per_batch ? m / R : 0) * Q + (m % R) % Q) * N;
#pragma omp simd
          for (int64_t j = 0; j < N; ++j) v[j] += static_cast<A>(mr[j]);
        }
        const A inv_sum = static_cast<A>(1.0 / sum_exp(logits, row_max(logits, N), N, v));
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) v[j] *= inv_sum;
        if constexpr (!std::is_same_v<T, A>) narrow(v, yr, N);
      }
    }
  });
}

// y, dy, dx [M, N]: dx = scale·y·(dy − Σ dy·y), Σ in double, the rest in compute_t<T>.
void CpuBackend::attention_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) {
  DP_ASSERT(y.is_contiguous() && dy.is_contiguous() && dx.is_contiguous() && y.dim() == 2);
  const int64_t M = y.size(0), N = y.size(1);
  if (M == 0 || N == 0) return;
  const int threads = y.numel() >= kParallelGrain ? num_threads_ : 1;
  dispatch_floating_and_half(y.dtype(), "attention_softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T* yp = y.data<T>();
    const T* gp = dy.data<T>();
    T* dxp = dx.data<T>();
    const A s = static_cast<A>(scale);
#pragma omp parallel num_threads(threads)
    {
      constexpr bool kWiden = !std::is_same_v<T, A>;
      std::vector<A> buffer(kWiden ? 3 * N : 0);
#pragma omp for schedule(static)
      for (int64_t m = 0; m < M; ++m) {
        const A *yr, *g;
        A* out;
        if constexpr (kWiden) {
          A* yw = buffer.data();
          A* gw = yw + N;
          widen(yp + m * N, yw, N);
          widen(gp + m * N, gw, N);
          yr = yw;
          g = gw;
          out = gw + N;
        } else {
          yr = yp + m * N;
          g = gp + m * N;
          out = dxp + m * N;
        }
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < N; ++j) dot += static_cast<double>(g[j]) * yr[j];
        const A d = static_cast<A>(dot);
#pragma omp simd
        for (int64_t j = 0; j < N; ++j) out[j] = s * yr[j] * (g[j] - d);
        if constexpr (kWiden) narrow(out, dxp + m * N, N);
      }
    }
  });
}

// logits, log_probs [M, C] contiguous; target int64 [M]; losses [M].
// Per sample: loss = -(1-ε)·log p[target] - (ε/C)·Σ_c log p[c], with Σ_c log p[c] = Σ x - C·lse,
// so the row is read twice (max, then exp-sum with Σ x) and written once (log_probs).
void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& log_probs,
                                       const Tensor& losses, int64_t ignore_index, double label_smoothing) {
  DP_ASSERT(logits.is_contiguous() && log_probs.is_contiguous() && target.is_contiguous() &&
            logits.dim() == 2 && target.dtype() == kInt64);
  const int64_t M = logits.size(0), C = logits.size(1);
  const int64_t* tp = target.data<int64_t>();
  check_targets(tp, M, C, ignore_index);
  const int threads = logits.numel() >= kParallelGrain ? num_threads_ : 1;
  const double target_weight = 1.0 - label_smoothing, uniform_weight = label_smoothing / static_cast<double>(C);
  dispatch_floating(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = logits.data<T>();
    T* lp = log_probs.data<T>();
    T* loss = losses.data<T>();
    for_each_row(M, threads, [&](int64_t m) {
      const T* xr = xp + m * C;
      T* lr = lp + m * C;
      const T mx = row_max(xr, C);
      double sum_e = 0, sum_x = 0;
#pragma omp simd reduction(+ : sum_e, sum_x)
      for (int64_t j = 0; j < C; ++j) {
        sum_e += static_cast<double>(std::exp(xr[j] - mx));
        sum_x += static_cast<double>(xr[j]);
      }
      const double lse = mx + std::log(sum_e);
      const T tlse = static_cast<T>(lse);
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) lr[j] = xr[j] - tlse;
      const int64_t t = tp[m];
      if (t == ignore_index) {
        loss[m] = T(0);
      } else {
        const double sum_log_p = sum_x - static_cast<double>(C) * lse;
        loss[m] = static_cast<T>(-target_weight * (static_cast<double>(xr[t]) - lse) - uniform_weight * sum_log_p);
      }
    });
  });
}

// log_probs, dlogits [M, C] contiguous; target int64 [M]; dlosses [M] contiguous.
// dlogits = dloss·(softmax - (1-ε)·onehot(target) - ε/C); zero rows for ignored samples.
void CpuBackend::cross_entropy_backward(const Tensor& log_probs, const Tensor& target, const Tensor& dlosses,
                                        const Tensor& dlogits, int64_t ignore_index, double label_smoothing) {
  DP_ASSERT(log_probs.is_contiguous() && dlogits.is_contiguous() && dlosses.is_contiguous() &&
            target.is_contiguous() && log_probs.dim() == 2 && target.dtype() == kInt64);
  const int64_t M = log_probs.size(0), C = log_probs.size(1);
  const int64_t* tp = target.data<int64_t>();
  const int threads = log_probs.numel() >= kParallelGrain ? num_threads_ : 1;
  dispatch_floating(log_probs.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* lp = log_probs.data<T>();
    const T* dl = dlosses.data<T>();
    T* dx = dlogits.data<T>();
    const T uniform_weight = static_cast<T>(label_smoothing / static_cast<double>(C));
    const T target_weight = static_cast<T>(1.0 - label_smoothing);
    for_each_row(M, threads, [&](int64_t m) {
      T* out = dx + m * C;
      const int64_t t = tp[m];
      if (t == ignore_index) {
        std::fill(out, out + C, T(0));
        return;
      }
      const T* lr = lp + m * C;
      const T g = dl[m];
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) out[j] = g * (std::exp(lr[j]) - uniform_weight);
      out[t] -= g * target_weight;
    });
  });
}

}  // namespace dp
