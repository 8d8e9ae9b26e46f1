// Reductions over arbitrary dims, and row argmax.
#include <omp.h>

#include <limits>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/strided_loop.h"

namespace dp {

using namespace cpu;

namespace {

template <typename T>
T reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max: return -std::numeric_limits<T>::infinity();
    case ReduceOp::Min: return std::numeric_limits<T>::infinity();
    default: return T(0);
  }
}

// Accumulates x into acc (laid out like out), walking x in memory order. acc_strides are out's
// strides expanded to x's shape (0 on reduced dims). Accumulation is in double for float32 and
// float16/bfloat16 sums so long reductions (bias gradients over N·H·W) stay accurate.
template <typename T, typename Acc>
void accumulate(ReduceOp op, const T* x, const Shape& shape, const Shape& x_strides, Acc* acc,
                const Shape& acc_strides) {
  strided_loop<2>(shape, {&acc_strides, &x_strides}, 1,
                  [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                    using C = compute_t<T>;
                    Acc* a = acc + off[0];
                    const T* p = x + off[1];
                    auto at = [p](int64_t k) { return static_cast<C>(p[k]); };
                    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
                      if (st[0] == 0) {  // a run that folds into one output
                        Acc s = 0;
                        if (st[1] == 1) {
                          C part = 0;  // vectorised partial sums in C, folded every 256 elements
                          for (int64_t k = 0; k < n; ++k) {
                            part += at(k);
                            if ((k & 255) == 255) { s += part; part = 0; }
                          }
                          s += part;
                        } else {
                          for (int64_t k = 0; k < n; ++k) s += at(k * st[1]);
                        }
                        *a += s;
                      } else {
                        for (int64_t k = 0; k < n; ++k) a[k * st[0]] += at(k * st[1]);
                      }
                    } else if (op == ReduceOp::Max) {
                      for (int64_t k = 0; k < n; ++k) {
                        Acc v = at(k * st[1]);
                        Acc& d = a[k * st[0]];
                        d = (v > d || v != v) ? v : d;  // NaN propagates, as torch
                      }
                    } else {
                      for (int64_t k = 0; k < n; ++k) {
                        Acc v = at(k * st[1]);
                        Acc& d = a[k * st[0]];
                        d = (v < d || v != v) ? v : d;
                      }
                    }
                  });
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  DP_ASSERT(out.is_contiguous() && out.dim() == x.dim());
  dispatch_floating_and_half(x.dtype(), "reduce", [&](auto tag) {
    using T = decltype(tag);
    using Acc = double;
    const int64_t out_n = out.numel();
    Shape acc_strides = out.strides();
    for (int64_t d = 0; d < x.dim(); ++d)
      if (out.shape()[d] == 1 && x.shape()[d] != 1) acc_strides[d] = 0;
    const T* xp = x.data<T>();
    std::vector<Acc> acc(out_n, reduce_identity<Acc>(op));

    // Parallel over the outermost dim that has more than one element: threads own disjoint
    // slices of it; when that dim is reduced, each thread folds into a private accumulator.
    int64_t split_dim = -1;
    for (int64_t d = 0; d < x.dim() && split_dim < 0; ++d)
      if (x.shape()[d] > 1) split_dim = d;
    const int threads = x.numel() >= kParallelGrain && split_dim >= 0 ? num_threads_ : 1;
    if (threads == 1) {
      accumulate<T, Acc>(op, xp, x.shape(), x.strides(), acc.data(), acc_strides);
    } else {
      const bool kept = acc_strides[split_dim] != 0;
      std::vector<std::vector<Acc>> priv(kept ? 0 : threads, std::vector<Acc>(out_n, reduce_identity<Acc>(op)));
#pragma omp parallel num_threads(threads)
      {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int64_t len = x.shape()[split_dim];
        int64_t b = len * t / nt, e = len * (t + 1) / nt;
        if (e > b) {
          Shape sub = x.shape();
          sub[split_dim] = e - b;
          const T* xs = xp + b * x.strides()[split_dim];
          Acc* as = kept ? acc.data() + b * acc_strides[split_dim] : priv[t].data();
          accumulate<T, Acc>(op, xs, sub, x.strides(), as, acc_strides);
        }
      }
      for (const auto& p : priv) {
        for (int64_t i = 0; i < out_n; ++i) {
          if (op == ReduceOp::Sum || op == ReduceOp::Mean) acc[i] += p[i];
          else if (op == ReduceOp::Max) acc[i] = (p[i] > acc[i] || p[i] != p[i]) ? p[i] : acc[i];
          else acc[i] = (p[i] < acc[i] || p[i] != p[i]) ? p[i] : acc[i];
        }
      }
    }
    const double scale = op == ReduceOp::Mean ? static_cast<double>(out_n) / static_cast<double>(std::max<int64_t>(x.numel(), 1)) : 1.0;
    T* op_ = out.data<T>();
    for (int64_t i = 0; i < out_n; ++i) op_[i] = static_cast<T>(op == ReduceOp::Mean ? acc[i] * scale : acc[i]);
  });
}

void CpuBackend::argmax_rows(const Tensor& x, const Tensor& out) {
  DP_ASSERT(x.is_contiguous() && x.dim() == 2 && out.dtype() == kInt64);
  const int64_t M = x.shape()[0], N = x.shape()[1];
  int64_t* o = out.data<int64_t>();
  dispatch_floating_and_half(x.dtype(), "argmax", [&](auto tag) {
    using T = decltype(tag);
    const T* p = x.data<T>();
    for (int64_t m = 0; m < M; ++m) {
      const T* row = p + m * N;
      int64_t best = 0;
      for (int64_t n = 1; n < N; ++n)
        if (static_cast<compute_t<T>>(row[n]) > static_cast<compute_t<T>>(row[best])) best = n;
      o[m] = best;
    }
  });
}

}  // namespace dp
