// Normalisation kernels (the CPU's cpu/norm.cpp): batch norm where cuDNN is not used (bfloat16,
// shapes past cuDNN's limits, eps below CUDNN_BN_MIN_EPSILON, eval-mode backward, backward
// without dx; norm.cpp decides) and layer norm. Launchers after the kernels.
//
// Batch norm, x viewed as [N, C, S]: per-channel sums are a deterministic two-stage reduction
// with no atomics: grid (C, splits), block (c, k) reduces split k of channel c's N·S elements to
// one partial; a per-channel kernel then adds the `splits` partials in order. A third kernel
// applies the per-channel coefficients elementwise. Elements are walked in units of V (16 bytes
// when every run of S elements is aligned, else 1 element) without a division per element.
// S = 1 — channels-last x is [N·H·W, C, 1] (NOTE [ Channels-last ]), or a [N, C] input — makes
// channel c's elements C apart, so the partial sums are taken by column kernels instead: grid
// (column tiles, splits), a block of W unit columns (V adjacent channels a unit, W a power of two
// up to 32) by 256 / W row lanes; each lane walks rows of its split reading W units side by side
// (coalesced), and the block adds its lanes' sums as a fixed tree. They write the same partials,
// so the rest is shared.
//
// Layer norm, x viewed as [M, N]: one warp per row when N <= 1024, else one 256-thread block per
// row; two passes over the row for the variance (the second re-reads the row, which is in L1/L2).
// dweight/dbias are column sums: per-(column tile, row split) partials into a scratch
// [splits, N], then a fixed-order sum per column.
//
// Arithmetic is in acc_t<T> (float for float32/float16/bfloat16, double for float64).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/norm_kernels.h"

namespace dp::cuda {
namespace {

using namespace device;

constexpr int kBlock = 256;             // threads per block, every kernel here
constexpr int64_t kTargetBlocks = 1024;  // enough blocks for an H100 (132 SMs) several times over
constexpr int64_t kBnMinUnitsPerBlock = 2048;  // a split of a channel below this is not worth a block
constexpr int kLnWarpMaxN = 1024;       // layer norm: one warp per row up to this N
constexpr int kColTile = 32;            // layer norm dweight/dbias: columns per block
constexpr int kRowLanes = kBlock / kColTile;  // rows walked in parallel per block
constexpr int64_t kMinRowsPerSplit = 32;
// Batch norm's column reductions (S = 1): splits of at least this many rows, and about
// kTargetBlocks blocks of this many channels (bn_splits).
constexpr int64_t kMinRowsPerColumnSplit = 128;
constexpr int64_t kColumnBlockChannels = 256;
// Per-channel coefficients in the workspace: forward (mean, scale, shift), backward (a, mean_dy,
// k, mean, and the forward's scale and shift for relu's mask).
constexpr int kCoef = 6;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- Device helpers ---------------------------------------------------------------------------

template <typename T, int V>
__device__ __forceinline__ void load_units(const T* __restrict__ p, T (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = *p;
  } else {
    const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(p);
#pragma unroll
    for (int e = 0; e < V; ++e) out[e] = v.v[e];
  }
}

template <typename T, int V>
__device__ __forceinline__ void store_units(T* __restrict__ p, const T (&in)[V]) {
  if constexpr (V == 1) {
    *p = in[0];
  } else {
    Vec<T, V> v;
#pragma unroll
    for (int e = 0; e < V; ++e) v.v[e] = in[e];
    *reinterpret_cast<Vec<T, V>*>(p) = v;
  }
}

// Position (n, s) of unit j of one channel (j = n·Sv + s), advanced by a fixed step with no
// division in the loop.
struct RunWalker {
  int64_t n, s, dn, ds, Sv;
  __device__ __forceinline__ RunWalker(int64_t j, int64_t step, int64_t units_per_run) : Sv(units_per_run) {
    n = j / Sv;
    s = j - n * Sv;
    dn = step / Sv;
    ds = step - dn * Sv;
  }
  __device__ __forceinline__ void advance() {
    s += ds;
    n += dn;
    if (s >= Sv) {
      s -= Sv;
      ++n;
    }
  }
};

// Sum over a group of kGroup threads: a warp (32) or the whole block (kBlock).
template <int kGroup, typename A>
__device__ __forceinline__ A group_sum(A v, A* scratch) {
  if constexpr (kGroup == 32) return warp_sum(v);
  else return block_sum(v, scratch);
}

// max(v, 0) that keeps a NaN, as the CPU's std::max(v, 0.0).
template <typename A>
__device__ __forceinline__ A nonnegative(A v) {
  return v < A(0) ? A(0) : v;
}

// Batch norm's per-channel affine map, v = (x − mean)·scale + shift, written once for the forward
// and for a backward that recomputes it to mask relu's gradient (NOTE [ Batch norm's relu mask,
// recomputed ] in cpu/norm.cpp): the coefficients from the statistics as saved (the forward's
// parameter type is the accumulation type whenever it saves them) and an explicit fma, so that
// both sides get the same bits whatever the compiler contracts.
template <typename A, typename P>
__device__ __forceinline__ A bn_scale(A invstd, const P* __restrict__ weight, int64_t c) {
  return invstd * (weight ? convert<A>(weight[c]) : A(1));
}
template <typename A, typename P>
__device__ __forceinline__ A bn_shift(const P* __restrict__ bias, int64_t c) {
  return bias ? convert<A>(bias[c]) : A(0);
}
template <typename A>
__device__ __forceinline__ A bn_affine(A x, A mean, A scale, A shift) {
  return fma(x - mean, scale, shift);
}
// relu(v) as the forward stored it in T is positive: relu's mask, y > 0.
template <typename T, typename A>
__device__ __forceinline__ bool bn_relu_passes(A v) {
  return convert<A>(convert<T>(v)) > A(0);
}

// ---- Batch norm kernels -----------------------------------------------------------------------

// x [N, C, S] with S = Sv·V; partial [C, splits, 2]: Σ(x - K) and Σ(x - K)² over split k of
// channel c's N·S elements, with K = x[0, c, 0] (NOTE [ Shifted moments ], cpu/norm.cpp).
// Grid (C, splits).
template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    bn_stats_partial_kernel(const T* __restrict__ x, acc_t<T>* __restrict__ partial, int64_t N, int64_t C,
                            int64_t Sv) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t c = blockIdx.x, k = blockIdx.y, splits = gridDim.y;
  const int64_t units = N * Sv;
  const int64_t end = units * (k + 1) / splits;
  const A shift = convert<A>(x[c * Sv * V]);
  A sum = 0, sum_sq = 0;
  int64_t j = units * k / splits + threadIdx.x;
  if (j < end) {
    RunWalker w(j, blockDim.x, Sv);
    for (; j < end; j += blockDim.x, w.advance()) {
      T v[V];
      load_units<T, V>(x + ((w.n * C + c) * Sv + w.s) * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A d = convert<A>(v[e]) - shift;
        sum += d;
        sum_sq += d * d;
      }
    }
  }
  sum = block_sum(sum, scratch);
  sum_sq = block_sum(sum_sq, scratch);
  if (threadIdx.x == 0) {
    partial[(c * splits + k) * 2] = sum;
    partial[(c * splits + k) * 2 + 1] = sum_sq;
  }
}

// S = 1: partial [C, splits, 2] as the run kernels write it, from x viewed as [R, C] with
// C = Cv·V (V channels a thread, one 16-byte load when V = kVec<T>). Grid (ceil(Cv / W), splits),
// block kBlock = W unit columns × L = kBlock / W row lanes (W = bn_column_width(Cv), a power of
// two, so narrow layers do not leave threads idle). Lane l walks rows begin + l, begin + l + L, ...
// of its split, kColumnUnroll rows' loads issued before their sums: one scalar load in flight per
// thread left the forward statistics of ResNet-50's batch norms at about a sixth of an H200's
// bandwidth (call 5: 2.15 ms a step for one read of the activations). Each thread adds its rows
// in order and the block adds its lanes' sums as a fixed tree, so the result does not depend on
// timing (deterministic).
constexpr int kColumnUnroll = 4;

// Rows r, r + step, ... below end, kColumnUnroll at a time: load(i, row) for each row of a group
// (i its slot, a constant once unrolled), then finish(i, row) for each; the last rows one by one
// (slot 0). The callers keep each slot's values in registers between the two.
template <typename Load, typename Finish>
__device__ __forceinline__ void walk_rows(int64_t r, int64_t end, int64_t step, Load&& load, Finish&& finish) {
  for (; r + (kColumnUnroll - 1) * step < end; r += kColumnUnroll * step) {
#pragma unroll
    for (int i = 0; i < kColumnUnroll; ++i) load(i, r + i * step);
#pragma unroll
    for (int i = 0; i < kColumnUnroll; ++i) finish(i, r + i * step);
  }
  for (; r < end; r += step) {
    load(0, r);
    finish(0, r);
  }
}

template <typename A, int V, typename Terms>
__global__ void __launch_bounds__(kBlock)
    bn_columns_kernel(Terms terms, A* __restrict__ partial, int64_t R, int64_t Cv, int W) {
  __shared__ A tile[2 * V][kBlock];
  const int col = threadIdx.x % W, lane = threadIdx.x / W, L = kBlock / W;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * W + col;
  const int64_t k = blockIdx.y, splits = gridDim.y;
  const int64_t begin = R * k / splits, end = R * (k + 1) / splits;
  A first[V], second[V];
#pragma unroll
  for (int e = 0; e < V; ++e) first[e] = second[e] = A(0);
  if (u < Cv) {
    typename Terms::Constants constant;
    terms.constants(u, constant);
    typename Terms::Row rows[kColumnUnroll];
    walk_rows(
        begin + lane, end, L, [&](int i, int64_t r) { terms.load(r, u, rows[i]); },
        [&](int i, int64_t) { terms.add(rows[i], constant, first, second); });
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    tile[e][threadIdx.x] = first[e];
    tile[V + e][threadIdx.x] = second[e];
  }
  __syncthreads();
  // Thread lane·W + col adds lane + stride's sums of its column: a fixed tree over the L lanes.
  for (int stride = L / 2; stride > 0; stride /= 2) {
    if (lane < stride) {
#pragma unroll
      for (int j = 0; j < 2 * V; ++j) tile[j][threadIdx.x] += tile[j][threadIdx.x + stride * W];
    }
    __syncthreads();
  }
  if (lane == 0 && u < Cv) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t c = u * V + e;
      partial[(c * splits + k) * 2] = tile[e][col];
      partial[(c * splits + k) * 2 + 1] = tile[V + e][col];
    }
  }
}

// Σ(x − K) and Σ(x − K)² with K = x[0, c] (bn_stats_partial_kernel's shifted moments); x [R, Cv·V].
template <typename T, int V>
struct MomentTerms {
  using A = acc_t<T>;
  struct Row {
    T x[V];
  };
  struct Constants {
    A shift[V];
  };
  const T* __restrict__ x;
  int64_t Cv;
  __device__ __forceinline__ void constants(int64_t u, Constants& k) const {
    T v[V];
    load_units<T, V>(x + u * V, v);
#pragma unroll
    for (int e = 0; e < V; ++e) k.shift[e] = convert<A>(v[e]);
  }
  __device__ __forceinline__ void load(int64_t r, int64_t u, Row& row) const {
    load_units<T, V>(x + (r * Cv + u) * V, row.x);
  }
  __device__ __forceinline__ void add(const Row& row, const Constants& k, A (&sum)[V], A (&sum_sq)[V]) const {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A d = convert<A>(row.x[e]) - k.shift[e];
      sum[e] += d;
      sum_sq[e] += d * d;
    }
  }
};

// Σ dy and Σ dy·(x − mean) (bn_grad_partial_kernel's sums); dy, x [R, Cv·V]; mean, invstd,
// weight, bias [Cv·V] (the last three for relu's mask, kRelu: dy masked where the forward's y was
// not positive; weight, bias null: ones, zeros).
template <typename T, typename P, int V, bool kRelu>
struct GradTerms {
  using A = acc_t<T>;
  struct Row {
    T dy[V], x[V];
  };
  struct Constants {
    A mean[V];
    A scale[kRelu ? V : 1], shift[kRelu ? V : 1];
  };
  const T* __restrict__ dy;
  const T* __restrict__ x;
  const P* __restrict__ mean;
  const P* __restrict__ invstd;
  const P* __restrict__ weight;
  const P* __restrict__ bias;
  int64_t Cv;
  __device__ __forceinline__ void constants(int64_t u, Constants& k) const {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const int64_t c = u * V + e;
      k.mean[e] = convert<A>(mean[c]);
      if constexpr (kRelu) {
        k.scale[e] = bn_scale<A>(convert<A>(invstd[c]), weight, c);
        k.shift[e] = bn_shift<A>(bias, c);
      }
    }
  }
  __device__ __forceinline__ void load(int64_t r, int64_t u, Row& row) const {
    load_units<T, V>(dy + (r * Cv + u) * V, row.dy);
    load_units<T, V>(x + (r * Cv + u) * V, row.x);
  }
  __device__ __forceinline__ void add(const Row& row, const Constants& k, A (&sum_dy)[V],
                                      A (&sum_dy_xc)[V]) const {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A xe = convert<A>(row.x[e]);
      A g = convert<A>(row.dy[e]);
      if constexpr (kRelu) g = bn_relu_passes<T>(bn_affine(xe, k.mean[e], k.scale[e], k.shift[e])) ? g : A(0);
      sum_dy[e] += g;
      sum_dy_xc[e] += g * (xe - k.mean[e]);
    }
  }
};

// GradTerms' sums of dy masked by relu's mask read from the forward's output (y > 0 ? dy : 0,
// relu's own backward; BatchNormGradPrologue::relu_output), the masked gradient stored to
// `masked` as it is made: bn → add → relu, where it is also the residual's gradient.
template <typename T, typename P, int V>
struct MaskedGradTerms {
  using A = acc_t<T>;
  struct Row {
    T dy[V], y[V], x[V];
    int64_t offset;
  };
  struct Constants {
    A mean[V];
  };
  const T* __restrict__ dy;
  const T* __restrict__ y;
  const T* __restrict__ x;
  T* __restrict__ masked;
  const P* __restrict__ mean;
  int64_t Cv;
  __device__ __forceinline__ void constants(int64_t u, Constants& k) const {
#pragma unroll
    for (int e = 0; e < V; ++e) k.mean[e] = convert<A>(mean[u * V + e]);
  }
  __device__ __forceinline__ void load(int64_t r, int64_t u, Row& row) const {
    row.offset = (r * Cv + u) * V;
    load_units<T, V>(dy + row.offset, row.dy);
    load_units<T, V>(y + row.offset, row.y);
    load_units<T, V>(x + row.offset, row.x);
  }
  __device__ __forceinline__ void add(const Row& row, const Constants& k, A (&sum_dy)[V],
                                      A (&sum_dy_xc)[V]) const {
    T out[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const A g = convert<A>(row.y[e]) > A(0) ? convert<A>(row.dy[e]) : A(0);
      out[e] = convert<T>(g);  // dy's value itself (exact round trip) or +0
      sum_dy[e] += g;
      sum_dy_xc[e] += g * (convert<A>(row.x[e]) - k.mean[e]);
    }
    store_units<T, V>(masked + row.offset, out);
  }
};

// x [N, C, S] (only x[0, c, 0], the shift K, is read); partial [C, splits, 2] (training);
// weight, bias [C] (null: ones, zeros); running_mean, running_var [C] (training: updated, null →
// skipped; eval: read); save_mean, save_invstd [C] (training: written); coef [C, kCoef]: mean,
// scale, shift for the apply kernels. One warp per channel: its lanes add the splits' partials
// (lane l takes l, l + 32, ...; a fixed order) — one thread walking up to kTargetBlocks partials
// in sequence was 35 µs a call on an H200, a tenth of ResNet-50's batch-norm time.
template <typename T, typename P>
__global__ void bn_forward_finalize_kernel(const T* __restrict__ x, const acc_t<T>* __restrict__ partial,
                                           int64_t splits, const P* __restrict__ weight, const P* __restrict__ bias,
                                           P* __restrict__ running_mean, P* __restrict__ running_var,
                                           P* __restrict__ save_mean, P* __restrict__ save_invstd,
                                           acc_t<T>* __restrict__ coef, int64_t C, int64_t S, double count,
                                           bool training, double momentum, double eps) {
  using A = acc_t<T>;
  const A cnt = static_cast<A>(count);
  // Running variance uses the unbiased batch variance, as PyTorch (the output uses the biased one).
  const A unbias = count > 1 ? static_cast<A>(count / (count - 1)) : A(1);
  const A mom = static_cast<A>(momentum);
  const int lane = threadIdx.x & 31;
  // The channel is uniform across each warp, as warp_sum needs.
  for (int64_t c = first_index() / 32; c < C; c += grid_stride() / 32) {
    A mean, invstd;
    if (training) {
      A sum = 0, sum_sq = 0;
      for (int64_t k = lane; k < splits; k += 32) {
        sum += partial[(c * splits + k) * 2];
        sum_sq += partial[(c * splits + k) * 2 + 1];
      }
      sum = warp_sum(sum);
      sum_sq = warp_sum(sum_sq);
      const A m = sum / cnt;
      mean = convert<A>(x[c * S]) + m;
      const A var = nonnegative(sum_sq / cnt - m * m);
      invstd = A(1) / sqrt(var + static_cast<A>(eps));
      if (lane == 0) {
        save_mean[c] = convert<P>(mean);
        save_invstd[c] = convert<P>(invstd);
        if (running_mean) running_mean[c] = convert<P>((A(1) - mom) * convert<A>(running_mean[c]) + mom * mean);
        if (running_var) running_var[c] = convert<P>((A(1) - mom) * convert<A>(running_var[c]) + mom * var * unbias);
      }
    } else {
      mean = convert<A>(running_mean[c]);
      invstd = A(1) / sqrt(convert<A>(running_var[c]) + static_cast<A>(eps));
    }
    if (lane == 0) {
      coef[c * kCoef] = mean;
      coef[c * kCoef + 1] = bn_scale<A>(invstd, weight, c);
      coef[c * kCoef + 2] = bn_shift<A>(bias, c);
    }
  }
}

// The forward's epilogue on one unit: v += the residual's values r (when has_residual), then
// relu (when asked; NaN → 0 as ReluFn in pointwise.cu). In acc_t: the sum is rounded once, into y.
template <typename T, int V, typename A>
__device__ __forceinline__ void bn_epilogue(A (&v)[V], const T (&r)[V], bool has_residual, bool relu) {
  if (has_residual) {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] += convert<A>(r[e]);
  }
  if (relu) {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = v[e] > A(0) ? v[e] : A(0);
  }
}

// x, y, residual [N, C, S] with S = Sv·V (units = N·C·Sv); coef [C, kCoef] (mean, scale, shift):
// y = epilogue((x - mean)·scale + shift). Grid-stride over units; the channel is tracked
// incrementally.
template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    bn_apply_kernel(const T* __restrict__ x, T* __restrict__ y, const acc_t<T>* __restrict__ coef, int64_t C,
                    int64_t Sv, int64_t units, const T* __restrict__ residual, bool relu) {
  using A = acc_t<T>;
  int64_t i = first_index();
  if (i >= units) return;
  const int64_t step = grid_stride();
  const int64_t row = i / Sv;
  int64_t s = i - row * Sv, c = row % C;
  const int64_t step_rows = step / Sv, step_s = step - step_rows * Sv, step_c = step_rows % C;
  for (; i < units; i += step) {
    const A mean = coef[c * kCoef], scale = coef[c * kCoef + 1], shift = coef[c * kCoef + 2];
    T v[V];
    A a[V];
    load_units<T, V>(x + i * V, v);
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = bn_affine(convert<A>(v[e]), mean, scale, shift);
    T r[V];
    if (residual) load_units<T, V>(residual + i * V, r);
    bn_epilogue<T, V>(a, r, residual != nullptr, relu);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = convert<T>(a[e]);
    store_units<T, V>(y + i * V, v);
    // (s, c) of i + step: c + step_c + 1 <= 2C - 1, so one wrap suffices.
    s += step_s;
    c += step_c;
    if (s >= Sv) {
      s -= Sv;
      ++c;
    }
    if (c >= C) c -= C;
  }
}

// S = 1 (channels-last, or [N, C]): x, y, residual [R, C] with C = Cv·V; y = epilogue(bn(x)).
// The launch runs `threads` threads, a multiple of Cv, so thread t owns unit column u = t % Cv
// for its whole life: it reads its V channels' coefficients once and walks rows r = t / Cv,
// t / Cv + threads / Cv, ..., kColumnUnroll rows' loads issued before their stores (one load in
// flight per thread held these kernels to about 40 % of an H200's bandwidth in call 5). The
// generic kernel, walking [N, C, 1] with a channel per element, reads the coefficients for every
// element and cannot vectorise (S = 1): it ran ResNet-50's channels-last batch norm at a third
// of the memory bandwidth.
template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    bn_apply_columns_kernel(const T* __restrict__ x, T* __restrict__ y, const acc_t<T>* __restrict__ coef,
                            int64_t R, int64_t Cv, int64_t threads, const T* __restrict__ residual, bool relu) {
  using A = acc_t<T>;
  const int64_t t = first_index();
  if (t >= threads) return;
  const int64_t u = t % Cv, row_step = threads / Cv;
  A mean[V], scale[V], shift[V];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int64_t c = u * V + e;
    mean[e] = coef[c * kCoef];
    scale[e] = coef[c * kCoef + 1];
    shift[e] = coef[c * kCoef + 2];
  }
  T v[kColumnUnroll][V], res[kColumnUnroll][V];
  walk_rows(
      t / Cv, R, row_step,
      [&](int i, int64_t r) {
        load_units<T, V>(x + (r * Cv + u) * V, v[i]);
        if (residual) load_units<T, V>(residual + (r * Cv + u) * V, res[i]);
      },
      [&](int i, int64_t r) {
        A a[V];
#pragma unroll
        for (int e = 0; e < V; ++e) a[e] = bn_affine(convert<A>(v[i][e]), mean[e], scale[e], shift[e]);
        bn_epilogue<T, V>(a, res[i], residual != nullptr, relu);
        T out[V];
#pragma unroll
        for (int e = 0; e < V; ++e) out[e] = convert<T>(a[e]);
        store_units<T, V>(y + (r * Cv + u) * V, out);
      });
}

// dy, x, dx [R, C] with C = Cv·V; coef [C, kCoef] (a, mean_dy, k, mean, scale, shift):
// bn_dx_kernel's formula with bn_apply_columns_kernel's walk and unrolling; kRelu: dy masked by
// relu's mask (training only; scale and shift are then the forward's).
template <typename T, int V, bool kRelu>
__global__ void __launch_bounds__(kBlock)
    bn_dx_columns_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                         const acc_t<T>* __restrict__ coef, int64_t R, int64_t Cv, int64_t threads, bool training) {
  using A = acc_t<T>;
  const int64_t t = first_index();
  if (t >= threads) return;
  const int64_t u = t % Cv, row_step = threads / Cv;
  A a[V], mean_dy[V], k[V], mean[V], scale[kRelu ? V : 1], shift[kRelu ? V : 1];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    const int64_t c = u * V + e;
    a[e] = coef[c * kCoef];
    mean_dy[e] = coef[c * kCoef + 1];
    k[e] = coef[c * kCoef + 2];
    mean[e] = coef[c * kCoef + 3];
    if constexpr (kRelu) {
      scale[e] = coef[c * kCoef + 4];
      shift[e] = coef[c * kCoef + 5];
    }
  }
  T g[kColumnUnroll][V], xv[kColumnUnroll][V];
  walk_rows(
      t / Cv, R, row_step,
      [&](int i, int64_t r) {
        load_units<T, V>(dy + (r * Cv + u) * V, g[i]);
        if (training) load_units<T, V>(x + (r * Cv + u) * V, xv[i]);
      },
      [&](int i, int64_t r) {
        T out[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          A ge = convert<A>(g[i][e]);
          if constexpr (kRelu) {
            const A xe = convert<A>(xv[i][e]);
            ge = bn_relu_passes<T>(bn_affine(xe, mean[e], scale[e], shift[e])) ? ge : A(0);
          }
          const A d = training ? ge - mean_dy[e] - (convert<A>(xv[i][e]) - mean[e]) * k[e] : ge;
          out[e] = convert<T>(a[e] * d);
        }
        store_units<T, V>(dx + (r * Cv + u) * V, out);
      });
}

// dy, x [N, C, S] with S = Sv·V; save_mean [C]; partial [C, splits, 2]: Σ dy and
// Σ dy·(x - mean) over split k of channel c. Grid (C, splits). relu: dy masked by relu's mask,
// recomputed with save_invstd, weight and bias [C] (null: ones, zeros). relu_y (not with relu):
// dy masked where relu_y, the forward's output, is not positive, and the masked gradient stored
// to masked (MaskedGradTerms).
template <typename T, typename P, int V>
__global__ void __launch_bounds__(kBlock)
    bn_grad_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x, const P* __restrict__ save_mean,
                           acc_t<T>* __restrict__ partial, int64_t N, int64_t C, int64_t Sv, bool relu,
                           const P* __restrict__ save_invstd, const P* __restrict__ weight,
                           const P* __restrict__ bias, const T* __restrict__ relu_y, T* __restrict__ masked) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  const int64_t c = blockIdx.x, k = blockIdx.y, splits = gridDim.y;
  const int64_t units = N * Sv;
  const int64_t end = units * (k + 1) / splits;
  const A mean = convert<A>(save_mean[c]);
  const A scale = relu ? bn_scale<A>(convert<A>(save_invstd[c]), weight, c) : A(0);
  const A shift = relu ? bn_shift<A>(bias, c) : A(0);
  A sum_dy = 0, sum_dy_xc = 0;
  int64_t j = units * k / splits + threadIdx.x;
  if (j < end) {
    RunWalker w(j, blockDim.x, Sv);
    for (; j < end; j += blockDim.x, w.advance()) {
      const int64_t off = ((w.n * C + c) * Sv + w.s) * V;
      T g[V], xv[V], yv[V];
      load_units<T, V>(dy + off, g);
      load_units<T, V>(x + off, xv);
      if (relu_y) load_units<T, V>(relu_y + off, yv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A xe = convert<A>(xv[e]);
        A ge = convert<A>(g[e]);
        if (relu) ge = bn_relu_passes<T>(bn_affine(xe, mean, scale, shift)) ? ge : A(0);
        if (relu_y) {
          ge = convert<A>(yv[e]) > A(0) ? ge : A(0);
          g[e] = convert<T>(ge);  // dy's value itself (exact round trip) or +0
        }
        sum_dy += ge;
        sum_dy_xc += ge * (xe - mean);
      }
      if (relu_y) store_units<T, V>(masked + off, g);
    }
  }
  sum_dy = block_sum(sum_dy, scratch);
  sum_dy_xc = block_sum(sum_dy_xc, scratch);
  if (threadIdx.x == 0) {
    partial[(c * splits + k) * 2] = sum_dy;
    partial[(c * splits + k) * 2 + 1] = sum_dy_xc;
  }
}

// partial [C, splits, 2] (null: no sums were taken, they are 0); weight, bias [C] (null: ones,
// zeros); save_mean, save_invstd [C]; dweight, dbias [C] (null: skipped); coef [C, kCoef]: a,
// mean_dy, k, mean for the dx kernels (dx = a·(dy - mean_dy - (x - mean)·k); eval: mean_dy = k =
// 0), then the forward's scale and shift for relu's mask. One warp per channel, as
// bn_forward_finalize_kernel.
template <typename T, typename P>
__global__ void bn_backward_finalize_kernel(const acc_t<T>* __restrict__ partial, int64_t splits,
                                            const P* __restrict__ weight, const P* __restrict__ bias,
                                            const P* __restrict__ save_mean, const P* __restrict__ save_invstd,
                                            P* __restrict__ dweight, P* __restrict__ dbias,
                                            acc_t<T>* __restrict__ coef, int64_t C, double count, bool training) {
  using A = acc_t<T>;
  const A cnt = static_cast<A>(count);
  const int lane = threadIdx.x & 31;
  for (int64_t c = first_index() / 32; c < C; c += grid_stride() / 32) {
    A sum_dy = 0, sum_dy_xc = 0;
    if (partial) {
      for (int64_t k = lane; k < splits; k += 32) {
        sum_dy += partial[(c * splits + k) * 2];
        sum_dy_xc += partial[(c * splits + k) * 2 + 1];
      }
      sum_dy = warp_sum(sum_dy);
      sum_dy_xc = warp_sum(sum_dy_xc);
    }
    if (lane != 0) continue;
    const A invstd = convert<A>(save_invstd[c]);
    if (dweight) dweight[c] = convert<P>(sum_dy_xc * invstd);
    if (dbias) dbias[c] = convert<P>(sum_dy);
    coef[c * kCoef] = (weight ? convert<A>(weight[c]) : A(1)) * invstd;
    coef[c * kCoef + 1] = training ? sum_dy / cnt : A(0);
    coef[c * kCoef + 2] = training ? sum_dy_xc * invstd * invstd / cnt : A(0);
    coef[c * kCoef + 3] = convert<A>(save_mean[c]);
    coef[c * kCoef + 4] = bn_scale<A>(invstd, weight, c);
    coef[c * kCoef + 5] = bn_shift<A>(bias, c);
  }
}

// dy, x, dx [N, C, S] with S = Sv·V (units = N·C·Sv); coef [C, kCoef] (a, mean_dy, k, mean,
// scale, shift): training dx = a·(dy - mean_dy - (x - mean)·k), dy masked by relu's mask (from
// scale and shift) with `relu`; eval dx = a·dy (x not read).
template <typename T, int V>
__global__ void __launch_bounds__(kBlock)
    bn_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                 const acc_t<T>* __restrict__ coef, int64_t C, int64_t Sv, int64_t units, bool training, bool relu) {
  using A = acc_t<T>;
  int64_t i = first_index();
  if (i >= units) return;
  const int64_t step = grid_stride();
  const int64_t row = i / Sv;
  int64_t s = i - row * Sv, c = row % C;
  const int64_t step_rows = step / Sv, step_s = step - step_rows * Sv, step_c = step_rows % C;
  for (; i < units; i += step) {
    const A a = coef[c * kCoef];
    T g[V];
    load_units<T, V>(dy + i * V, g);
    if (training) {
      const A mean_dy = coef[c * kCoef + 1], k = coef[c * kCoef + 2], mean = coef[c * kCoef + 3];
      T xv[V];
      load_units<T, V>(x + i * V, xv);
      if (relu) {
        const A scale = coef[c * kCoef + 4], shift = coef[c * kCoef + 5];
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (!bn_relu_passes<T>(bn_affine(convert<A>(xv[e]), mean, scale, shift))) g[e] = convert<T>(A(0));
      }
#pragma unroll
      for (int e = 0; e < V; ++e)
        g[e] = convert<T>(a * (convert<A>(g[e]) - mean_dy - (convert<A>(xv[e]) - mean) * k));
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) g[e] = convert<T>(a * convert<A>(g[e]));
    }
    store_units<T, V>(dx + i * V, g);
    s += step_s;
    c += step_c;
    if (s >= Sv) {
      s -= Sv;
      ++c;
    }
    if (c >= C) c -= C;
  }
}

// ---- Layer norm kernels -----------------------------------------------------------------------

// x, y [M, N] (N = Nv·V); weight, bias [N] (null: ones, zeros); save_mean, save_rstd [M].
// kGroup threads per row (a warp, or the whole block); rows grid-strided.
// mean = Σx/N; var = Σ(x - mean)²/N (second pass); y = (x - mean)·rstd·w + b.
template <typename T, typename P, int V, int kGroup>
__global__ void __launch_bounds__(kBlock)
    ln_forward_kernel(const T* __restrict__ x, const P* __restrict__ weight, const P* __restrict__ bias,
                      T* __restrict__ y, P* __restrict__ save_mean, P* __restrict__ save_rstd, int64_t M,
                      int64_t N, double eps) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  constexpr int kRowsPerBlock = kBlock / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t Nv = N / V;
  const A n = static_cast<A>(N);
  // The row is uniform across each group (warp or block), as group_sum needs.
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup; row < M;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + row * N;
    T* yr = y + row * N;
    A sum = 0;
    for (int64_t u = lane; u < Nv; u += kGroup) {
      T v[V];
      load_units<T, V>(xr + u * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) sum += convert<A>(v[e]);
    }
    const A mean = group_sum<kGroup>(sum, scratch) / n;
    A sum_sq = 0;
    for (int64_t u = lane; u < Nv; u += kGroup) {
      T v[V];
      load_units<T, V>(xr + u * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A d = convert<A>(v[e]) - mean;
        sum_sq += d * d;
      }
    }
    const A var = group_sum<kGroup>(sum_sq, scratch) / n;
    const A rstd = A(1) / sqrt(var + static_cast<A>(eps));
    if (lane == 0) {
      save_mean[row] = convert<P>(mean);
      save_rstd[row] = convert<P>(rstd);
    }
    for (int64_t u = lane; u < Nv; u += kGroup) {
      T v[V];
      load_units<T, V>(xr + u * V, v);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int64_t j = u * V + e;
        const A w = weight ? convert<A>(weight[j]) : A(1);
        const A b = bias ? convert<A>(bias[j]) : A(0);
        v[e] = convert<T>((convert<A>(v[e]) - mean) * rstd * w + b);
      }
      store_units<T, V>(yr + u * V, v);
    }
  }
}

// dy, x, dx [M, N] (N = Nv·V); weight [N] (null: ones); save_mean, save_rstd [M].
// g = dy·w: dx = rstd·(g - Σg/N - (x - mean)·k), k = Σ g·(x - mean) · rstd² / N.
template <typename T, typename P, int V, int kGroup>
__global__ void __launch_bounds__(kBlock)
    ln_backward_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x, const P* __restrict__ weight,
                          const P* __restrict__ save_mean, const P* __restrict__ save_rstd, T* __restrict__ dx,
                          int64_t M, int64_t N) {
  using A = acc_t<T>;
  __shared__ A scratch[32];
  constexpr int kRowsPerBlock = kBlock / kGroup;
  const int lane = threadIdx.x % kGroup;
  const int64_t Nv = N / V;
  const A n = static_cast<A>(N);
  for (int64_t row = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup; row < M;
       row += int64_t(gridDim.x) * kRowsPerBlock) {
    const T* gr = dy + row * N;
    const T* xr = x + row * N;
    T* out = dx + row * N;
    const A mean = convert<A>(save_mean[row]), rstd = convert<A>(save_rstd[row]);
    A sum_g = 0, sum_g_xc = 0;
    for (int64_t u = lane; u < Nv; u += kGroup) {
      T g[V], xv[V];
      load_units<T, V>(gr + u * V, g);
      load_units<T, V>(xr + u * V, xv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A ge = convert<A>(g[e]) * (weight ? convert<A>(weight[u * V + e]) : A(1));
        sum_g += ge;
        sum_g_xc += ge * (convert<A>(xv[e]) - mean);
      }
    }
    sum_g = group_sum<kGroup>(sum_g, scratch);
    sum_g_xc = group_sum<kGroup>(sum_g_xc, scratch);
    const A mean_g = sum_g / n;
    const A k = sum_g_xc * rstd * rstd / n;
    for (int64_t u = lane; u < Nv; u += kGroup) {
      T g[V], xv[V];
      load_units<T, V>(gr + u * V, g);
      load_units<T, V>(xr + u * V, xv);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A ge = convert<A>(g[e]) * (weight ? convert<A>(weight[u * V + e]) : A(1));
        g[e] = convert<T>(rstd * (ge - mean_g - (convert<A>(xv[e]) - mean) * k));
      }
      store_units<T, V>(out + u * V, g);
    }
  }
}

// dy, x [M, N]; save_mean, save_rstd [M]; partial_w, partial_b [splits, N] (null: not wanted):
// over rows [k·rows_per_split, (k+1)·rows_per_split) of columns [32·bx, 32·bx + 32):
// Σ dy·(x - mean)·rstd and Σ dy. Grid (ceil(N/32), splits); 8 row lanes, then a fixed-order sum.
template <typename T, typename P>
__global__ void __launch_bounds__(kBlock)
    ln_param_grad_partial_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                 const P* __restrict__ save_mean, const P* __restrict__ save_rstd,
                                 acc_t<T>* __restrict__ partial_w, acc_t<T>* __restrict__ partial_b, int64_t M,
                                 int64_t N, int64_t rows_per_split) {
  using A = acc_t<T>;
  __shared__ A tile_w[kRowLanes][kColTile + 1];
  __shared__ A tile_b[kRowLanes][kColTile + 1];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t j = int64_t(blockIdx.x) * kColTile + tx;
  const int64_t m0 = int64_t(blockIdx.y) * rows_per_split;
  const int64_t m1 = M < m0 + rows_per_split ? M : m0 + rows_per_split;
  A acc_w = 0, acc_b = 0;
  if (j < N) {
    for (int64_t m = m0 + ty; m < m1; m += kRowLanes) {
      const A g = convert<A>(dy[m * N + j]);
      if (partial_w)
        acc_w += g * ((convert<A>(x[m * N + j]) - convert<A>(save_mean[m])) * convert<A>(save_rstd[m]));
      acc_b += g;
    }
  }
  tile_w[ty][tx] = acc_w;
  tile_b[ty][tx] = acc_b;
  __syncthreads();
  if (ty == 0 && j < N) {
    A total_w = 0, total_b = 0;
#pragma unroll
    for (int r = 0; r < kRowLanes; ++r) {
      total_w += tile_w[r][tx];
      total_b += tile_b[r][tx];
    }
    const int64_t o = int64_t(blockIdx.y) * N + j;
    if (partial_w) partial_w[o] = total_w;
    if (partial_b) partial_b[o] = total_b;
  }
}

// partial_w, partial_b [splits, N] (null: not wanted); dweight, dbias [N]: the column sums in
// split order.
template <typename T, typename P>
__global__ void ln_param_grad_final_kernel(const acc_t<T>* __restrict__ partial_w,
                                           const acc_t<T>* __restrict__ partial_b, P* __restrict__ dweight,
                                           P* __restrict__ dbias, int64_t splits, int64_t N) {
  using A = acc_t<T>;
  for (int64_t j = first_index(); j < N; j += grid_stride()) {
    if (dweight) {
      A total = 0;
      for (int64_t k = 0; k < splits; ++k) total += partial_w[k * N + j];
      dweight[j] = convert<P>(total);
    }
    if (dbias) {
      A total = 0;
      for (int64_t k = 0; k < splits; ++k) total += partial_b[k * N + j];
      dbias[j] = convert<P>(total);
    }
  }
}

// ---- Host helpers -----------------------------------------------------------------------------

template <typename T>
inline constexpr DType acc_dtype_v = std::is_same_v<acc_t<T>, double> ? DType::Float64 : DType::Float32;

// Calls fn(T{}, P{}) with the activation type T of `dtype` and the parameter type P of
// `param_dtype` (T itself or acc_t<T>); returns the launch status, or cudaErrorInvalidValue for
// any other combination (nothing launched).
template <typename Fn>
cudaError_t dispatch_norm(DType dtype, DType param_dtype, Fn&& fn) {
  bool launched = false;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (param_dtype == dtype) {
      fn(T{}, T{});
      launched = true;
    } else if (param_dtype == acc_dtype_v<T>) {
      fn(T{}, acc_t<T>{});
      launched = true;
    }
  });
  return launched ? cudaGetLastError() : cudaErrorInvalidValue;
}

size_t acc_size(DType dtype) { return dtype == DType::Float64 ? sizeof(double) : sizeof(float); }

// Splits per channel for the batch-norm reductions (grid (C, splits)); the same for both
// launchers and batch_norm_workspace_bytes.
int64_t bn_splits(const BatchNormShape& s) {
  if (s.S == 1) {
    // Column kernels: about kTargetBlocks blocks as wide as a vectorised bfloat16 block (32 units
    // of 8 channels), each split at least kMinRowsPerColumnSplit rows. From N and C alone: the
    // workspace is sized before the launch knows whether its operands vectorise (narrower blocks
    // then just make more of them).
    const int64_t by_rows = ceil_div(s.N, kMinRowsPerColumnSplit);
    const int64_t by_blocks = ceil_div(kTargetBlocks, ceil_div(s.C, kColumnBlockChannels));
    return std::max<int64_t>(1, std::min(by_rows, by_blocks));
  }
  const int64_t per_channel = s.N * s.S;
  const int64_t by_work = ceil_div(per_channel, kBnMinUnitsPerBlock);
  const int64_t by_occupancy = ceil_div(kTargetBlocks, std::max<int64_t>(s.C, 1));
  return std::max<int64_t>(1, std::min(by_work, by_occupancy));  // <= kTargetBlocks
}

// The workspace as acc_t elements: partial [C, splits, 2], then coef [C, kCoef].
struct BnWorkspace {
  int64_t splits;
  size_t partial_elems, coef_elems;
};
BnWorkspace bn_workspace(const BatchNormShape& s) {
  const int64_t splits = bn_splits(s);
  return {splits, static_cast<size_t>(s.C * splits * 2), static_cast<size_t>(s.C * kCoef)};
}

// Units of 16 bytes when every run of S elements is 16-byte aligned in every operand.
template <typename T>
bool bn_vectorizable(int64_t S, std::initializer_list<const void*> ptrs) {
  if (S % kVec<T> != 0) return false;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return false;
  return true;
}

// Unit columns per block of bn_columns_kernel: Cv rounded up to a power of two, at most 32 (the
// rest of the block's 256 threads are row lanes).
int bn_column_width(int64_t Cv) {
  int w = 1;
  while (w < 32 && w < Cv) w *= 2;
  return w;
}

// bn_columns_kernel over the terms make(integral_constant<int, V>, Cv) returns (MomentTerms or
// GradTerms), with V = kVec<T> channels a thread when `vectorize`, else one.
template <typename T, typename Make>
void launch_bn_columns(bool vectorize, const BatchNormShape& s, int64_t splits, acc_t<T>* partial, Make make,
                       cudaStream_t stream) {
  auto launch = [&](auto v_tag) {
    constexpr int V = decltype(v_tag)::value;
    const int64_t Cv = s.C / V;
    const int W = bn_column_width(Cv);
    const dim3 grid(static_cast<unsigned>(ceil_div(Cv, W)), static_cast<unsigned>(splits));
    bn_columns_kernel<acc_t<T>, V><<<grid, kBlock, 0, stream>>>(make(std::integral_constant<int, V>{}, Cv),
                                                                 partial, s.N, Cv, W);
  };
  if (vectorize) launch(std::integral_constant<int, kVec<T>>{});
  else launch(std::integral_constant<int, 1>{});
}

// Threads for the S = 1 column kernels over [R, Cv] units: one each up to about one wave of the
// GPU (kTargetBlocks blocks; beyond, a thread walks several rows and its coefficients are reused),
// rounded down to a multiple of Cv (each thread keeps one unit column); 0 when even one thread per
// column would pass that cap (the generic kernels then run).
int64_t bn_column_threads(int64_t R, int64_t Cv) {
  const int64_t cap = kTargetBlocks * kBlock;
  if (Cv > cap) return 0;
  return std::min(R * Cv, cap / Cv * Cv);
}

struct LnSplits {
  int64_t splits, rows_per_split;
};
LnSplits ln_splits(int64_t M, int64_t N) {
  const int64_t col_blocks = std::max<int64_t>(1, ceil_div(N, kColTile));
  int64_t splits = std::min(ceil_div(kTargetBlocks, col_blocks), ceil_div(M, kMinRowsPerSplit));
  splits = std::max<int64_t>(splits, 1);
  const int64_t rows_per_split = std::max<int64_t>(1, ceil_div(M, splits));
  return {std::max<int64_t>(1, ceil_div(M, rows_per_split)), rows_per_split};
}

unsigned row_blocks(int64_t M, int group) {
  const int64_t rows_per_block = kBlock / group;
  return static_cast<unsigned>(std::min<int64_t>(ceil_div(M, rows_per_block), int64_t(1) << 20));
}

}  // namespace

// ---- Batch norm launchers ---------------------------------------------------------------------

size_t batch_norm_workspace_bytes(DType dtype, BatchNormShape shape) {
  const BnWorkspace ws = bn_workspace(shape);
  return (ws.partial_elems + ws.coef_elems) * acc_size(dtype);
}

cudaError_t launch_batch_norm_forward(const BatchNormForwardArgs& args, DType dtype, DType param_dtype,
                                      BatchNormShape shape, bool training, double momentum, double eps,
                                      void* workspace, cudaStream_t stream) {
  const int64_t N = shape.N, C = shape.C, S = shape.S;
  if (N * C * S == 0) return cudaSuccess;
  if (!workspace || !args.x || !args.y) return cudaErrorInvalidValue;
  if (training ? (!args.save_mean || !args.save_invstd) : (!args.running_mean || !args.running_var))
    return cudaErrorInvalidValue;
  if (C > INT32_MAX) return cudaErrorInvalidValue;  // channels are gridDim.x
  const BnWorkspace ws = bn_workspace(shape);
  const double count = static_cast<double>(N) * static_cast<double>(S);
  return dispatch_norm(dtype, param_dtype, [&](auto t_tag, auto p_tag) {
    using T = decltype(t_tag);
    using P = decltype(p_tag);
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(args.x);
    T* y = static_cast<T*>(args.y);
    A* partial = static_cast<A*>(workspace);
    A* coef = partial + ws.partial_elems;
    const bool vec = bn_vectorizable<T>(S, {args.x, args.y});
    if (training && S == 1) {
      launch_bn_columns<T>(
          bn_vectorizable<T>(C, {args.x}), shape, ws.splits, partial,
          [&](auto v_tag, int64_t Cv) { return MomentTerms<T, decltype(v_tag)::value>{x, Cv}; }, stream);
    } else if (training) {
      const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(ws.splits));
      if (vec) bn_stats_partial_kernel<T, kVec<T>><<<grid, kBlock, 0, stream>>>(x, partial, N, C, S / kVec<T>);
      else bn_stats_partial_kernel<T, 1><<<grid, kBlock, 0, stream>>>(x, partial, N, C, S);
    }
    bn_forward_finalize_kernel<T, P><<<blocks_for(C * 32), kBlock, 0, stream>>>(
        x, partial, ws.splits, static_cast<const P*>(args.weight), static_cast<const P*>(args.bias),
        static_cast<P*>(args.running_mean), static_cast<P*>(args.running_var), static_cast<P*>(args.save_mean),
        static_cast<P*>(args.save_invstd), coef, C, S, count, training, momentum, eps);
    const T* residual = static_cast<const T*>(args.residual);
    const bool relu = args.relu;
    const int64_t col_vec = bn_vectorizable<T>(C, {args.x, args.y, args.residual}) ? kVec<T> : 1;
    const int64_t col_threads = S == 1 ? bn_column_threads(N, C / col_vec) : 0;
    if (col_threads > 0) {
      const unsigned blocks = static_cast<unsigned>(ceil_div(col_threads, kBlock));
      if (col_vec > 1)
        bn_apply_columns_kernel<T, kVec<T>>
            <<<blocks, kBlock, 0, stream>>>(x, y, coef, N, C / col_vec, col_threads, residual, relu);
      else
        bn_apply_columns_kernel<T, 1><<<blocks, kBlock, 0, stream>>>(x, y, coef, N, C, col_threads, residual, relu);
    } else if (bn_vectorizable<T>(S, {args.x, args.y, args.residual})) {
      const int64_t units = N * C * S / kVec<T>;
      bn_apply_kernel<T, kVec<T>>
          <<<blocks_for(units), kBlock, 0, stream>>>(x, y, coef, C, S / kVec<T>, units, residual, relu);
    } else {
      bn_apply_kernel<T, 1>
          <<<blocks_for(N * C * S), kBlock, 0, stream>>>(x, y, coef, C, S, N * C * S, residual, relu);
    }
  });
}

cudaError_t launch_batch_norm_backward(const BatchNormBackwardArgs& args, DType dtype, DType param_dtype,
                                       BatchNormShape shape, bool training, void* workspace,
                                       cudaStream_t stream) {
  const int64_t N = shape.N, C = shape.C, S = shape.S;
  if (N * C * S == 0 || (!args.dx && !args.dweight && !args.dbias)) return cudaSuccess;
  if (!workspace || !args.dy || !args.x || !args.save_mean || !args.save_invstd) return cudaErrorInvalidValue;
  if (C > INT32_MAX) return cudaErrorInvalidValue;  // channels are gridDim.x
  // relu's mask recomputes the training forward's y, whose coefficients came from statistics in
  // the accumulation type.
  const DType acc_dtype = dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  if (args.relu && (!training || param_dtype != acc_dtype)) return cudaErrorInvalidValue;
  const BnWorkspace ws = bn_workspace(shape);
  const double count = static_cast<double>(N) * static_cast<double>(S);
  const bool need_sums = (args.dx && training) || args.dweight || args.dbias;
  const bool relu = args.relu;
  // relu's mask from the forward's output, folded into the sums pass, which writes masked_dy;
  // dx is then computed from it (BatchNormGradPrologue).
  const bool mask_by_y = args.relu_output != nullptr;
  if (mask_by_y && (relu || !training || !need_sums || !args.masked_dy)) return cudaErrorInvalidValue;
  return dispatch_norm(dtype, param_dtype, [&](auto t_tag, auto p_tag) {
    using T = decltype(t_tag);
    using P = decltype(p_tag);
    using A = acc_t<T>;
    const T* dy = static_cast<const T*>(args.dy);
    const T* x = static_cast<const T*>(args.x);
    const T* relu_y = static_cast<const T*>(args.relu_output);
    T* masked = static_cast<T*>(args.masked_dy);
    T* dx = static_cast<T*>(args.dx);
    const P* weight = static_cast<const P*>(args.weight);
    const P* bias = static_cast<const P*>(args.bias);
    const P* save_mean = static_cast<const P*>(args.save_mean);
    const P* save_invstd = static_cast<const P*>(args.save_invstd);
    A* partial = static_cast<A*>(workspace);
    A* coef = partial + ws.partial_elems;
    if (need_sums && S == 1) {
      auto columns = [&](auto relu_tag) {
        launch_bn_columns<T>(
            bn_vectorizable<T>(C, {args.dy, args.x}), shape, ws.splits, partial,
            [&](auto v_tag, int64_t Cv) {
              return GradTerms<T, P, decltype(v_tag)::value, decltype(relu_tag)::value>{
                  dy, x, save_mean, save_invstd, weight, bias, Cv};
            },
            stream);
      };
      if (mask_by_y) {
        launch_bn_columns<T>(
            bn_vectorizable<T>(C, {args.dy, args.x, args.relu_output, args.masked_dy}), shape, ws.splits, partial,
            [&](auto v_tag, int64_t Cv) {
              return MaskedGradTerms<T, P, decltype(v_tag)::value>{dy, relu_y, x, masked, save_mean, Cv};
            },
            stream);
      } else if (relu) {
        columns(std::true_type{});
      } else {
        columns(std::false_type{});
      }
    } else if (need_sums) {
      const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(ws.splits));
      if (bn_vectorizable<T>(S, {args.dy, args.x, args.relu_output, args.masked_dy}))
        bn_grad_partial_kernel<T, P, kVec<T>><<<grid, kBlock, 0, stream>>>(
            dy, x, save_mean, partial, N, C, S / kVec<T>, relu, save_invstd, weight, bias, relu_y, masked);
      else
        bn_grad_partial_kernel<T, P, 1><<<grid, kBlock, 0, stream>>>(dy, x, save_mean, partial, N, C, S, relu,
                                                                      save_invstd, weight, bias, relu_y, masked);
    }
    if (mask_by_y) dy = masked;  // dx from the masked gradient the sums pass wrote
    bn_backward_finalize_kernel<T, P><<<blocks_for(C * 32), kBlock, 0, stream>>>(
        need_sums ? partial : nullptr, ws.splits, weight, bias, save_mean, save_invstd, static_cast<P*>(args.dweight),
        static_cast<P*>(args.dbias), coef, C, count, training);
    const int64_t col_vec = bn_vectorizable<T>(C, {dy, args.x, args.dx}) ? kVec<T> : 1;
    const int64_t col_threads = dx && S == 1 ? bn_column_threads(N, C / col_vec) : 0;
    if (col_threads > 0) {
      const unsigned blocks = static_cast<unsigned>(ceil_div(col_threads, kBlock));
      const int64_t Cv = C / col_vec;
      auto launch = [&](auto v_tag, auto relu_tag) {
        bn_dx_columns_kernel<T, decltype(v_tag)::value, decltype(relu_tag)::value>
            <<<blocks, kBlock, 0, stream>>>(dy, x, dx, coef, N, Cv, col_threads, training);
      };
      using Vector = std::integral_constant<int, kVec<T>>;
      using Scalar = std::integral_constant<int, 1>;
      if (col_vec > 1 && relu) launch(Vector{}, std::true_type{});
      else if (col_vec > 1) launch(Vector{}, std::false_type{});
      else if (relu) launch(Scalar{}, std::true_type{});
      else launch(Scalar{}, std::false_type{});
    } else if (dx) {
      if (bn_vectorizable<T>(S, {dy, args.x, args.dx})) {
        const int64_t units = N * C * S / kVec<T>;
        bn_dx_kernel<T, kVec<T>>
            <<<blocks_for(units), kBlock, 0, stream>>>(dy, x, dx, coef, C, S / kVec<T>, units, training, relu);
      } else {
        bn_dx_kernel<T, 1>
            <<<blocks_for(N * C * S), kBlock, 0, stream>>>(dy, x, dx, coef, C, S, N * C * S, training, relu);
      }
    }
  });
}

// ---- Layer norm launchers ---------------------------------------------------------------------

cudaError_t launch_layer_norm_forward(const void* x, const void* weight, const void* bias, void* y,
                                      void* save_mean, void* save_rstd, DType dtype, DType param_dtype,
                                      int64_t M, int64_t N, double eps, cudaStream_t stream) {
  if (M == 0 || N == 0) return cudaSuccess;
  if (!x || !y || !save_mean || !save_rstd) return cudaErrorInvalidValue;
  return dispatch_norm(dtype, param_dtype, [&](auto t_tag, auto p_tag) {
    using T = decltype(t_tag);
    using P = decltype(p_tag);
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    const P* w = static_cast<const P*>(weight);
    const P* b = static_cast<const P*>(bias);
    P* sm = static_cast<P*>(save_mean);
    P* sr = static_cast<P*>(save_rstd);
    const bool vec = N % kVec<T> == 0 && aligned16(x) && aligned16(y);
    if (N <= kLnWarpMaxN) {
      const unsigned grid = row_blocks(M, 32);
      if (vec) ln_forward_kernel<T, P, kVec<T>, 32><<<grid, kBlock, 0, stream>>>(xp, w, b, yp, sm, sr, M, N, eps);
      else ln_forward_kernel<T, P, 1, 32><<<grid, kBlock, 0, stream>>>(xp, w, b, yp, sm, sr, M, N, eps);
    } else {
      const unsigned grid = row_blocks(M, kBlock);
      if (vec)
        ln_forward_kernel<T, P, kVec<T>, kBlock><<<grid, kBlock, 0, stream>>>(xp, w, b, yp, sm, sr, M, N, eps);
      else ln_forward_kernel<T, P, 1, kBlock><<<grid, kBlock, 0, stream>>>(xp, w, b, yp, sm, sr, M, N, eps);
    }
  });
}

size_t layer_norm_workspace_bytes(DType dtype, int64_t M, int64_t N, bool param_grads) {
  if (!param_grads || M == 0 || N == 0) return 0;
  const LnSplits sp = ln_splits(M, N);
  return static_cast<size_t>(2 * sp.splits * N) * acc_size(dtype);
}

cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const void* weight, const void* save_mean,
                                       const void* save_rstd, void* dx, void* dweight, void* dbias, DType dtype,
                                       DType param_dtype, int64_t M, int64_t N, void* workspace,
                                       cudaStream_t stream) {
  if (M == 0 || N == 0 || (!dx && !dweight && !dbias)) return cudaSuccess;
  if (!dy || !x || !save_mean || !save_rstd) return cudaErrorInvalidValue;
  if ((dweight || dbias) && !workspace) return cudaErrorInvalidValue;
  return dispatch_norm(dtype, param_dtype, [&](auto t_tag, auto p_tag) {
    using T = decltype(t_tag);
    using P = decltype(p_tag);
    using A = acc_t<T>;
    const T* dyp = static_cast<const T*>(dy);
    const T* xp = static_cast<const T*>(x);
    const P* w = static_cast<const P*>(weight);
    const P* sm = static_cast<const P*>(save_mean);
    const P* sr = static_cast<const P*>(save_rstd);
    if (dx) {
      T* dxp = static_cast<T*>(dx);
      const bool vec = N % kVec<T> == 0 && aligned16(dy) && aligned16(x) && aligned16(dx);
      if (N <= kLnWarpMaxN) {
        const unsigned grid = row_blocks(M, 32);
        if (vec)
          ln_backward_dx_kernel<T, P, kVec<T>, 32><<<grid, kBlock, 0, stream>>>(dyp, xp, w, sm, sr, dxp, M, N);
        else ln_backward_dx_kernel<T, P, 1, 32><<<grid, kBlock, 0, stream>>>(dyp, xp, w, sm, sr, dxp, M, N);
      } else {
        const unsigned grid = row_blocks(M, kBlock);
        if (vec)
          ln_backward_dx_kernel<T, P, kVec<T>, kBlock><<<grid, kBlock, 0, stream>>>(dyp, xp, w, sm, sr, dxp, M, N);
        else ln_backward_dx_kernel<T, P, 1, kBlock><<<grid, kBlock, 0, stream>>>(dyp, xp, w, sm, sr, dxp, M, N);
      }
    }
    if (dweight || dbias) {
      const LnSplits sp = ln_splits(M, N);
      A* partial_w = static_cast<A*>(workspace);
      A* partial_b = partial_w + sp.splits * N;
      const dim3 grid(static_cast<unsigned>(ceil_div(N, kColTile)), static_cast<unsigned>(sp.splits));
      ln_param_grad_partial_kernel<T, P><<<grid, kBlock, 0, stream>>>(
          dyp, xp, sm, sr, dweight ? partial_w : nullptr, dbias ? partial_b : nullptr, M, N, sp.rows_per_split);
      ln_param_grad_final_kernel<T, P><<<blocks_for(N), kBlock, 0, stream>>>(
          dweight ? partial_w : nullptr, dbias ? partial_b : nullptr, static_cast<P*>(dweight),
          static_cast<P*>(dbias), sp.splits, N);
    }
  });
}

}  // namespace dp::cuda
