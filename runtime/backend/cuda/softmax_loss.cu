// Softmax, log-softmax, attention's softmax and fused cross-entropy on CUDA (the CPU's
// cpu/softmax_loss.cpp); kernels first, launchers after.
//
// Every kernel works on whole rows of a contiguous [M, N] tensor:
//  - N <= 1024 (kWarpMaxCols): one warp per row, 8 rows per 256-thread block. The reducing
//    kernels keep the row in registers: lane l holds elements l, l + 32, l + 64, ... in ITEMS
//    slots (N / 32 rounded up to a power of two), so the row is read from memory once.
//  - N > 1024: one block per row. The forward kernels read the row twice: once for an online
//    max and Σ exp(x − max) (rescaled when the max grows; per thread, then combined over the
//    block), once to write; softmax backward reads for Σ, then writes. 16-byte vector access
//    when the row's pointers are 16-byte aligned, and a scalar tail.
// Rows past the grid are covered by a grid-stride loop over rows. Reductions accumulate in
// acc_t<T> (float for float32/float16/bfloat16, double for float64), exponentials are taken of
// x − max, and the formulas are the CPU kernel's (up to the order of rounding).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/softmax_loss_kernels.h"

namespace dp::cuda {
namespace {

using namespace device;

constexpr int kWarpMaxCols = 1024;                            // widest row a warp takes
constexpr int kRowsPerWarpBlock = 8;                          // warps (rows) per block
constexpr int kWarpBlockThreads = 32 * kRowsPerWarpBlock;     // 256
constexpr int kMaxRowThreads = 512;                           // block-per-row kernels
constexpr int64_t kMaxRowBlocks = int64_t(1) << 20;           // grid-stride over rows past this

// ---- Device helpers ---------------------------------------------------------------------------

__device__ __forceinline__ float exp_acc(float v) { return expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return exp(v); }
__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }

__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// One pass over a row of n elements shared by `nthreads` threads (this one is `tid`): for every
// j, r = fn(j, a[j], b[j]) with the inputs converted to acc_t<T> (a only when NIN >= 1, b only
// when NIN == 2; absent ones read as 0), and out[j] = r when out is not null. The first
// n / kVec * kVec elements go 16 bytes at a time when every pointer used is 16-byte aligned;
// the rest (all of the row otherwise) one element at a time.
template <int NIN, typename T, typename Fn>
__device__ __forceinline__ void row_pass(const T* a, const T* b, T* out, int64_t n, int tid, int nthreads, Fn&& fn) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  using VecT = Vec<T, V>;
  const bool vec = (NIN < 1 || is_aligned16(a)) && (NIN < 2 || is_aligned16(b)) &&
                   (out == nullptr || is_aligned16(out));
  int64_t done = 0;
  if (vec) {
    const int64_t nv = n / V;
    for (int64_t i = tid; i < nv; i += nthreads) {
      VecT va, vb, vo;
      if constexpr (NIN >= 1) va = reinterpret_cast<const VecT*>(a)[i];
      if constexpr (NIN >= 2) vb = reinterpret_cast<const VecT*>(b)[i];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        A xa = A(0), xb = A(0);
        if constexpr (NIN >= 1) xa = convert<A>(va.v[k]);
        if constexpr (NIN >= 2) xb = convert<A>(vb.v[k]);
        const A r = fn(i * V + k, xa, xb);
        if (out != nullptr) vo.v[k] = convert<T>(r);
      }
      if (out != nullptr) reinterpret_cast<VecT*>(out)[i] = vo;
    }
    done = nv * V;
  }
  for (int64_t j = done + tid; j < n; j += nthreads) {
    A xa = A(0), xb = A(0);
    if constexpr (NIN >= 1) xa = convert<A>(a[j]);
    if constexpr (NIN >= 2) xb = convert<A>(b[j]);
    const A r = fn(j, xa, xb);
    if (out != nullptr) out[j] = convert<T>(r);
  }
}

// Online softmax statistics: after every value v of a sequence, m is its max and s is
// Σ exp(v − m). −inf values add nothing (and −inf − −inf would be NaN); NaN propagates to s.
template <typename A>
__device__ __forceinline__ void online_add(A& m, A& s, A v) {
  if (v > m) {
    s = s * exp_acc(m - v) + A(1);  // m = −inf at first: exp(−inf) = 0
    m = v;
  } else if (!(v == A(-INFINITY))) {
    s += exp_acc(v - m);
  }
}

// Combines the block's per-thread (m, s) into the row's max (returned in m) and Σ exp(x − max)
// (in s). `scratch` as block_sum's.
template <typename A>
__device__ __forceinline__ void block_online_combine(A& m, A& s, A* scratch) {
  const A row_max = block_max(m, scratch);
  // A thread that saw only −inf (or nothing) has s = 0 (or NaN, kept).
  const A scaled = m == A(-INFINITY) ? s : s * exp_acc(m - row_max);
  s = block_sum(scaled, scratch);
  m = row_max;
}

// losses[m] for target t (read by one thread): 0 when ignored; NaN and a recorded device error
// when out of range; else −(1−ε)·(x[t] − lse) − (ε/C)·(Σx − C·lse), in double as the CPU.
template <typename T, typename A>
__device__ __forceinline__ void write_loss(const T* xr, int64_t t, int64_t m, int64_t C, A lse, A sum_x,
                                           int64_t ignore_index, double target_weight, double uniform_weight,
                                           T* losses, DeviceErrors* errors) {
  double loss;
  if (t == ignore_index) {
    loss = 0.0;
  } else if (t < 0 || t >= C) {
    record_device_error(errors, DeviceErrorCode::ClassIndexOutOfRange, t, C, m);
    loss = NAN;
  } else {
    const double l = static_cast<double>(lse);
    loss = -target_weight * (convert<double>(xr[t]) - l) -
           uniform_weight * (static_cast<double>(sum_x) - static_cast<double>(C) * l);
  }
  losses[m] = convert<T>(loss);
}

// ---- Softmax forward --------------------------------------------------------------------------
//
// One set of kernels serves softmax, log-softmax and attention's softmax: each row's logits are
// scale·x + its mask row (AttentionMask in softmax_loss_kernels.h). Plain softmax passes scale 1
// and no mask, which leaves every value as it was (x·1 is exact; no mask adds nothing).

// Row m's additive mask row, or null.
__device__ __forceinline__ const float* mask_row(const AttentionMask& mask, int64_t m, int64_t N) {
  if (mask.data == nullptr) return nullptr;
  const int64_t b = mask.per_batch ? m / mask.rows_per_batch : 0;
  return mask.data + (b * mask.rows + (m % mask.rows_per_batch) % mask.rows) * N;
}

template <typename A>
__device__ __forceinline__ A logit(A x, A scale, const float* mr, int64_t j) {
  return mr == nullptr ? x * scale : x * scale + A(mr[j]);
}

// x, y [M, N] contiguous; N <= 32 * ITEMS; one warp per row.
template <typename T, int ITEMS, bool LOG>
__global__ void __launch_bounds__(kWarpBlockThreads)
    softmax_forward_warp_kernel(const T* __restrict__ x, AttentionMask mask, T* __restrict__ y, int64_t M, int N,
                                acc_t<T> scale) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kRowsPerWarpBlock;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + (threadIdx.x >> 5); m < M;
       m += row_stride) {
    const T* xr = x + m * N;
    const float* mr = mask_row(mask, m, N);
    T* yr = y + m * N;
    A v[ITEMS];
    A mx = A(-INFINITY);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = lane + 32 * i;
      v[i] = j < N ? logit(convert<A>(xr[j]), scale, mr, j) : A(-INFINITY);
      mx = fmax(mx, v[i]);
    }
    mx = warp_max(mx);
    A s = A(0);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      if (lane + 32 * i < N) {
        const A e = exp_acc(v[i] - mx);
        if constexpr (!LOG) v[i] = e;
        s += e;
      }
    }
    s = warp_sum(s);
    if constexpr (LOG) {
      const A lse = mx + log_acc(s);
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int j = lane + 32 * i;
        if (j < N) yr[j] = convert<T>(v[i] - lse);
      }
    } else {
      const A inv_sum = A(1) / s;
#pragma unroll
      for (int i = 0; i < ITEMS; ++i) {
        const int j = lane + 32 * i;
        if (j < N) yr[j] = convert<T>(v[i] * inv_sum);
      }
    }
  }
}

// x, y [M, N] contiguous; one block per row.
template <typename T, bool LOG>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_forward_block_kernel(const T* __restrict__ x, AttentionMask mask, T* __restrict__ y, int64_t M, int64_t N,
                                 acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* xr = x + m * N;
    const float* mr = mask_row(mask, m, N);
    T* yr = y + m * N;
    A mx = A(-INFINITY), s = A(0);
    row_pass<1, T>(xr, nullptr, nullptr, N, tid, nthreads, [&](int64_t j, A v, A) {
      online_add(mx, s, logit(v, scale, mr, j));
      return A(0);
    });
    block_online_combine(mx, s, scratch);
    if constexpr (LOG) {
      const A lse = mx + log_acc(s);
      row_pass<1, T>(xr, nullptr, yr, N, tid, nthreads,
                     [&](int64_t j, A v, A) { return logit(v, scale, mr, j) - lse; });
    } else {
      const A inv_sum = A(1) / s;
      row_pass<1, T>(xr, nullptr, yr, N, tid, nthreads,
                     [&](int64_t j, A v, A) { return exp_acc(logit(v, scale, mr, j) - mx) * inv_sum; });
    }
  }
}

// ---- Softmax backward -------------------------------------------------------------------------

// y, dy, dx [M, N] contiguous; N <= 32 * ITEMS; one warp per row.
// softmax: dx = scale·y·(dy − Σ dy·y) (scale 1 but for attention's); log_softmax: dx = dy − exp(y)·Σ dy.
template <typename T, int ITEMS, bool LOG>
__global__ void __launch_bounds__(kWarpBlockThreads)
    softmax_backward_warp_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t M,
                                 int N, acc_t<T> scale) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kRowsPerWarpBlock;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + (threadIdx.x >> 5); m < M;
       m += row_stride) {
    const T* yr = y + m * N;
    const T* gr = dy + m * N;
    T* out = dx + m * N;
    A yv[ITEMS], gv[ITEMS];
    A dot = A(0);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = lane + 32 * i;
      yv[i] = j < N ? convert<A>(yr[j]) : A(0);
      gv[i] = j < N ? convert<A>(gr[j]) : A(0);
      dot += LOG ? gv[i] : gv[i] * yv[i];
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = lane + 32 * i;
      if (j < N) out[j] = convert<T>(LOG ? gv[i] - exp_acc(yv[i]) * dot : scale * yv[i] * (gv[i] - dot));
    }
  }
}

// y, dy, dx [M, N] contiguous; one block per row.
template <typename T, bool LOG>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_backward_block_kernel(const T* __restrict__ y, const T* __restrict__ dy, T* __restrict__ dx, int64_t M,
                                  int64_t N, acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* yr = y + m * N;
    const T* gr = dy + m * N;
    T* out = dx + m * N;
    A dot = A(0);
    row_pass<2, T>(yr, gr, nullptr, N, tid, nthreads, [&](int64_t, A yv, A gv) {
      dot += LOG ? gv : gv * yv;
      return A(0);
    });
    dot = block_sum(dot, scratch);
    row_pass<2, T>(yr, gr, out, N, tid, nthreads, [&](int64_t, A yv, A gv) {
      return LOG ? gv - exp_acc(yv) * dot : scale * yv * (gv - dot);
    });
  }
}

// ---- Cross-entropy forward --------------------------------------------------------------------

// logits, log_probs [M, C] contiguous; target int64 [M]; losses [M]; C <= 32 * ITEMS; one warp
// per row. log_probs = x − lse; losses as write_loss.
template <typename T, int ITEMS>
__global__ void __launch_bounds__(kWarpBlockThreads)
    cross_entropy_forward_warp_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                                      T* __restrict__ log_probs, T* __restrict__ losses, int64_t M, int C,
                                      int64_t ignore_index, double target_weight, double uniform_weight,
                                      DeviceErrors* errors) {
  using A = acc_t<T>;
  const int lane = threadIdx.x & 31;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kRowsPerWarpBlock;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kRowsPerWarpBlock + (threadIdx.x >> 5); m < M;
       m += row_stride) {
    const T* xr = logits + m * C;
    T* lr = log_probs + m * C;
    A v[ITEMS];
    A mx = A(-INFINITY), sum_x = A(0);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = lane + 32 * i;
      v[i] = j < C ? convert<A>(xr[j]) : A(-INFINITY);
      mx = fmax(mx, v[i]);
      if (j < C) sum_x += v[i];
    }
    mx = warp_max(mx);
    sum_x = warp_sum(sum_x);
    A s = A(0);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i)
      if (lane + 32 * i < C) s += exp_acc(v[i] - mx);
    s = warp_sum(s);
    const A lse = mx + log_acc(s);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
      const int j = lane + 32 * i;
      if (j < C) lr[j] = convert<T>(v[i] - lse);
    }
    if (lane == 0)
      write_loss(xr, target[m], m, static_cast<int64_t>(C), lse, sum_x, ignore_index, target_weight, uniform_weight,
                 losses, errors);
  }
}

// logits, log_probs [M, C] contiguous; target int64 [M]; losses [M]; one block per row.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_forward_block_kernel(const T* __restrict__ logits, const int64_t* __restrict__ target,
                                       T* __restrict__ log_probs, T* __restrict__ losses, int64_t M, int64_t C,
                                       int64_t ignore_index, double target_weight, double uniform_weight,
                                       DeviceErrors* errors) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int tid = threadIdx.x, nthreads = blockDim.x;
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* xr = logits + m * C;
    T* lr = log_probs + m * C;
    A mx = A(-INFINITY), s = A(0), sum_x = A(0);
    row_pass<1, T>(xr, nullptr, nullptr, C, tid, nthreads, [&](int64_t, A v, A) {
      online_add(mx, s, v);
      sum_x += v;
      return A(0);
    });
    block_online_combine(mx, s, scratch);
    sum_x = block_sum(sum_x, scratch);
    const A lse = mx + log_acc(s);
    row_pass<1, T>(xr, nullptr, lr, C, tid, nthreads, [&](int64_t, A v, A) { return v - lse; });
    if (tid == 0)
      write_loss(xr, target[m], m, C, lse, sum_x, ignore_index, target_weight, uniform_weight, losses, errors);
  }
}

// ---- Cross-entropy backward -------------------------------------------------------------------

// log_probs, dlogits [M, C] contiguous; target int64 [M]; dlosses [M] contiguous.
// dlogits[m] = g·(exp(log_probs[m]) − ε/C) − (1−ε)·g·onehot(t), g = dlosses[m]; a zero row when
// t is ignore_index or out of range (the latter recorded). WARP: one warp per row (C <= 1024),
// kRowsPerWarpBlock rows per block; else one block per row. Elementwise: no reduction.
template <typename T, bool WARP>
__global__ void __launch_bounds__(kMaxRowThreads)
    cross_entropy_backward_kernel(const T* __restrict__ log_probs, const int64_t* __restrict__ target,
                                  const T* __restrict__ dlosses, T* __restrict__ dlogits, int64_t M, int64_t C,
                                  int64_t ignore_index, acc_t<T> target_weight, acc_t<T> uniform_weight,
                                  DeviceErrors* errors) {
  using A = acc_t<T>;
  const int tid = WARP ? static_cast<int>(threadIdx.x & 31) : static_cast<int>(threadIdx.x);
  const int nthreads = WARP ? 32 : static_cast<int>(blockDim.x);
  const int64_t rows_per_block = WARP ? blockDim.x / 32 : 1;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * rows_per_block + (WARP ? threadIdx.x / 32 : 0);
  for (int64_t m = first; m < M; m += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t t = target[m];
    T* out = dlogits + m * C;
    const bool ignored = t == ignore_index;
    const bool invalid = !ignored && (t < 0 || t >= C);
    if (invalid && tid == 0) record_device_error(errors, DeviceErrorCode::ClassIndexOutOfRange, t, C, m);
    if (ignored || invalid) {
      row_pass<0, T>(nullptr, nullptr, out, C, tid, nthreads, [](int64_t, A, A) { return A(0); });
      continue;
    }
    const A g = convert<A>(dlosses[m]);
    const A g_target = g * target_weight;
    row_pass<1, T>(log_probs + m * C, nullptr, out, C, tid, nthreads, [&](int64_t j, A lp, A) {
      const A r = g * (exp_acc(lp) - uniform_weight);
      return j == t ? r - g_target : r;
    });
  }
}

// ---- Launch helpers ---------------------------------------------------------------------------

// Calls fn(std::integral_constant<int, ITEMS>) with ITEMS = ceil(n / 32) rounded up to a power
// of two (n <= kWarpMaxCols).
template <typename Fn>
void with_items(int64_t n, Fn&& fn) {
  if (n <= 32) fn(std::integral_constant<int, 1>{});
  else if (n <= 64) fn(std::integral_constant<int, 2>{});
  else if (n <= 128) fn(std::integral_constant<int, 4>{});
  else if (n <= 256) fn(std::integral_constant<int, 8>{});
  else if (n <= 512) fn(std::integral_constant<int, 16>{});
  else fn(std::integral_constant<int, 32>{});
}

unsigned warp_row_blocks(int64_t M) {
  return static_cast<unsigned>(std::min<int64_t>((M + kRowsPerWarpBlock - 1) / kRowsPerWarpBlock, kMaxRowBlocks));
}

unsigned block_row_blocks(int64_t M) { return static_cast<unsigned>(std::min<int64_t>(M, kMaxRowBlocks)); }

// Threads of a block-per-row kernel: enough for a few 16-byte vectors each.
int block_row_threads(int64_t N) { return N <= 4096 ? 256 : kMaxRowThreads; }

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

cudaError_t launch_softmax_forward(const void* x, const AttentionMask& mask, void* y, DType dtype, int64_t M, int64_t N,
                                   bool log, double scale, cudaStream_t stream) {
  if (M < 0 || N < 0) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  if (mask.data != nullptr && (mask.rows < 1 || mask.rows_per_batch < 1 || mask.rows_per_batch % mask.rows != 0))
    return cudaErrorInvalidValue;
  const bool ok = dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    const A s = static_cast<A>(scale);
    if (N <= kWarpMaxCols) {
      with_items(N, [&](auto items) {
        constexpr int kItems = decltype(items)::value;
        if (log)
          softmax_forward_warp_kernel<T, kItems, true>
              <<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(xp, mask, yp, M, static_cast<int>(N), s);
        else
          softmax_forward_warp_kernel<T, kItems, false>
              <<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(xp, mask, yp, M, static_cast<int>(N), s);
      });
    } else if (log) {
      softmax_forward_block_kernel<T, true>
          <<<block_row_blocks(M), block_row_threads(N), 0, stream>>>(xp, mask, yp, M, N, s);
    } else {
      softmax_forward_block_kernel<T, false>
          <<<block_row_blocks(M), block_row_threads(N), 0, stream>>>(xp, mask, yp, M, N, s);
    }
  });
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_softmax_backward(const void* y, const void* dy, void* dx, DType dtype, int64_t M, int64_t N,
                                    bool log, double scale, cudaStream_t stream) {
  if (M < 0 || N < 0) return cudaErrorInvalidValue;
  if (M == 0 || N == 0) return cudaSuccess;
  if (y == nullptr || dy == nullptr || dx == nullptr) return cudaErrorInvalidValue;
  const bool ok = dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* yp = static_cast<const T*>(y);
    const T* gp = static_cast<const T*>(dy);
    T* dxp = static_cast<T*>(dx);
    const A s = static_cast<A>(scale);
    if (N <= kWarpMaxCols) {
      with_items(N, [&](auto items) {
        constexpr int kItems = decltype(items)::value;
        if (log)
          softmax_backward_warp_kernel<T, kItems, true>
              <<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(yp, gp, dxp, M, static_cast<int>(N), s);
        else
          softmax_backward_warp_kernel<T, kItems, false>
              <<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(yp, gp, dxp, M, static_cast<int>(N), s);
      });
    } else if (log) {
      softmax_backward_block_kernel<T, true>
          <<<block_row_blocks(M), block_row_threads(N), 0, stream>>>(yp, gp, dxp, M, N, s);
    } else {
      softmax_backward_block_kernel<T, false>
          <<<block_row_blocks(M), block_row_threads(N), 0, stream>>>(yp, gp, dxp, M, N, s);
    }
  });
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_forward(const void* logits, const int64_t* target, void* log_probs, void* losses,
                                         DType dtype, int64_t M, int64_t C, int64_t ignore_index,
                                         double label_smoothing, DeviceErrors* errors, cudaStream_t stream) {
  if (M < 0 || C < 0) return cudaErrorInvalidValue;
  if (M == 0) return cudaSuccess;
  if (C == 0 || logits == nullptr || target == nullptr || log_probs == nullptr || losses == nullptr ||
      errors == nullptr)
    return cudaErrorInvalidValue;
  const double target_weight = 1.0 - label_smoothing;
  const double uniform_weight = label_smoothing / static_cast<double>(C);
  const bool ok = dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(logits);
    T* lp = static_cast<T*>(log_probs);
    T* lossp = static_cast<T*>(losses);
    if (C <= kWarpMaxCols) {
      with_items(C, [&](auto items) {
        constexpr int kItems = decltype(items)::value;
        cross_entropy_forward_warp_kernel<T, kItems><<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(
            xp, target, lp, lossp, M, static_cast<int>(C), ignore_index, target_weight, uniform_weight, errors);
      });
    } else {
      cross_entropy_forward_block_kernel<T><<<block_row_blocks(M), block_row_threads(C), 0, stream>>>(
          xp, target, lp, lossp, M, C, ignore_index, target_weight, uniform_weight, errors);
    }
  });
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t launch_cross_entropy_backward(const void* log_probs, const int64_t* target, const void* dlosses,
                                          void* dlogits, DType dtype, int64_t M, int64_t C, int64_t ignore_index,
                                          double label_smoothing, DeviceErrors* errors, cudaStream_t stream) {
  if (M < 0 || C < 0) return cudaErrorInvalidValue;
  if (M == 0 || C == 0) return cudaSuccess;
  if (log_probs == nullptr || target == nullptr || dlosses == nullptr || dlogits == nullptr || errors == nullptr)
    return cudaErrorInvalidValue;
  const bool ok = dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    // As the CPU: both weights rounded to the element type first (no-op for float32/float64).
    const A uniform_weight = convert<A>(convert<T>(label_smoothing / static_cast<double>(C)));
    const A target_weight = convert<A>(convert<T>(1.0 - label_smoothing));
    const T* lp = static_cast<const T*>(log_probs);
    const T* dl = static_cast<const T*>(dlosses);
    T* dx = static_cast<T*>(dlogits);
    if (C <= kWarpMaxCols) {
      cross_entropy_backward_kernel<T, true><<<warp_row_blocks(M), kWarpBlockThreads, 0, stream>>>(
          lp, target, dl, dx, M, C, ignore_index, target_weight, uniform_weight, errors);
    } else {
      cross_entropy_backward_kernel<T, false><<<block_row_blocks(M), block_row_threads(C), 0, stream>>>(
          lp, target, dl, dx, M, C, ignore_index, target_weight, uniform_weight, errors);
    }
  });
  if (!ok) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace dp::cuda
