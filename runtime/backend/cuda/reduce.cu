// CUDA reductions (the CPU's cpu/reduce.cpp): sum/mean/max/min over any set of dims, and row
// argmax. Kernels first, launchers after.
//
// The front-end splits x's dims into kept ones (out index o, row-major) and reduced ones
// (index r, smallest stride innermost), so x[o, r] = x[kept(o) + reduced(r)]. Three kernels:
//  - rows, a warp per output (reduced extent <= kWarpRowMax) or a 256-thread block per output,
//    threads striding over r: coalesced when the innermost reduced dim is the contiguous one
//    (softmax-like rows, the per-channel sums of NCHW over {0, 2, 3}); 16-byte vector loads
//    when the reduced part is one contiguous run. Also the general fallback (any strides).
//  - columns, a 32x8 block per 32 consecutive outputs: thread x owns an output, the 8 thread
//    rows stride over r and are folded through shared memory. Coalesced when the kept dims are
//    innermost in memory (sum over dim 0 of [N, C], channels-last layouts).
//  - few outputs and a long reduction (a full reduction, per-channel sums of a large batch):
//    the reduced range is split across gridDim.y blocks, each writing a partial result in the
//    accumulation type to scratch [splits, K]; the columns kernel then folds the partials of
//    each output in a fixed order. The split depends on the problem only (never on the GPU),
//    so results are deterministic and device-independent; no atomics.
// Accumulation is in acc_t<T>: float for float16/bfloat16/float32, double for float64. Max and
// Min propagate NaN as the CPU (`v > acc || v != v`); an empty reduction gives the identity
// (Sum/Mean 0, Max -inf, Min +inf, as the CPU's accumulator initial values).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/reduce_kernels.h"

namespace dp::cuda {
namespace {

using namespace device;

enum class Combine { Sum, Max, Min };

constexpr int kWarp = 32;
constexpr int kColumnTile = 32;    // outputs per columns block (threadIdx.x)
constexpr int kColumnRows = 8;     // threads per output in a columns block (threadIdx.y)
constexpr int64_t kWarpRowMax = 4096;     // reduced extent up to which a warp owns an output
constexpr int64_t kTargetBlocks = 1024;   // split until about this many blocks are busy
constexpr int64_t kMaxSplits = 1024;
constexpr int64_t kMinRowSplit = 8192;    // elements per (output, split) block, rows kernel
constexpr int64_t kMinColumnSplit = 256;  // reduced elements per (tile, split) block, columns kernel
constexpr int64_t kArgmaxWarpMax = 1024;  // row length up to which a warp owns an argmax row

template <Combine C, typename A>
__device__ __forceinline__ A identity() {
  if constexpr (C == Combine::Max) return A(-INFINITY);
  else if constexpr (C == Combine::Min) return A(INFINITY);
  else return A(0);
}

// The CPU's fold: NaN in either operand gives NaN for Max/Min.
template <Combine C, typename A>
__device__ __forceinline__ A combine(A acc, A v) {
  if constexpr (C == Combine::Max) return (v > acc || v != v) ? v : acc;
  else if constexpr (C == Combine::Min) return (v < acc || v != v) ? v : acc;
  else return acc + v;
}

// Every lane of the (full) warp gets the fold of the 32 values.
template <Combine C, typename A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = combine<C>(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Fold over the block (blockDim a multiple of 32); every thread gets the result. `scratch`
// holds 32 values in shared memory; begins with a barrier so it may be called in a loop.
template <Combine C, typename A>
__device__ __forceinline__ A block_reduce(A v, A* scratch) {
  const int tid = threadIdx.x + threadIdx.y * blockDim.x;
  const int lane = tid & 31, warp = tid >> 5, warps = (blockDim.x * blockDim.y) >> 5;
  v = warp_reduce<C>(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : identity<C, A>();
  return warp_reduce<C>(v);
}

// x's offset of flat index i: one multiply for a single dim, else the full decode.
template <typename Index>
__device__ __forceinline__ int64_t offset_of(const OffsetCalculator<1, Index>& calc, int64_t i) {
  if (calc.ndim == 1) return i * static_cast<int64_t>(calc.strides[0][0]);
  Index off[1];
  calc.offsets(static_cast<Index>(i), off);
  return static_cast<int64_t>(off[0]);
}

// Folds p[0, n) into acc, the G threads of a group (lane in [0, G)) sharing the work: a scalar
// head up to the first 16-byte boundary, 16-byte vectors, a scalar tail. p is T-aligned.
template <Combine C, int G, typename T, typename A>
__device__ __forceinline__ A fold_contiguous(const T* p, int64_t n, int lane, A acc) {
  constexpr int V = kVec<T>;
  const int64_t misaligned = static_cast<int64_t>((reinterpret_cast<uintptr_t>(p) & 15u) / sizeof(T));
  const int64_t head = misaligned == 0 ? 0 : (V - misaligned < n ? V - misaligned : n);  // < V <= G
  if (lane < head) acc = combine<C>(acc, convert<A>(p[lane]));
  const T* q = p + head;
  const int64_t m = n - head, nvec = m / V;
  const Vec<T, V>* qv = reinterpret_cast<const Vec<T, V>*>(q);
#pragma unroll 4
  for (int64_t i = lane; i < nvec; i += G) {
    const Vec<T, V> v = qv[i];
#pragma unroll
    for (int k = 0; k < V; ++k) acc = combine<C>(acc, convert<A>(v.v[k]));
  }
  for (int64_t i = nvec * V + lane; i < m; i += G) acc = combine<C>(acc, convert<A>(q[i]));
  return acc;
}

// Writes one result: out [K] in T (scaled: Mean) when Final, else the partial in A.
template <typename T, bool Final, typename A>
__device__ __forceinline__ void store_result(void* out, int64_t index, A acc, double scale) {
  if constexpr (Final) static_cast<T*>(out)[index] = convert<T>(static_cast<double>(acc) * scale);
  else static_cast<A*>(out)[index] = acc;
}

// ---- Kernels ----------------------------------------------------------------------------------

// reduce_forward, rows: x strided (offsets kept(o) + reduced(r)); out [K] (Final) or partials
// [gridDim.y, K] in acc_t<T>. G threads (a warp or the whole 256-thread block) per output o;
// block y folds r in [y * chunk, min(R, (y + 1) * chunk)).
template <typename T, typename Index, Combine C, int G, bool Final>
__global__ void __launch_bounds__(kThreads) reduce_rows_kernel(const T* x, void* out, OffsetCalculator<1, Index> kept,
                                                              OffsetCalculator<1, Index> reduced, int64_t K, int64_t R,
                                                              int64_t chunk, double scale) {
  using A = acc_t<T>;
  static_assert(G == kWarp || G == kThreads, "a warp or a block per output");
  constexpr int kGroups = kThreads / G;  // outputs per block
  __shared__ A scratch[32];
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r_end = r_begin + chunk < R ? r_begin + chunk : R;
  const bool contiguous = reduced.ndim == 1 && reduced.strides[0][0] == 1;
  // o0 is uniform over the block, so every thread runs the same iterations (barriers inside).
  const int64_t o_step = static_cast<int64_t>(gridDim.x) * kGroups;
  for (int64_t o0 = static_cast<int64_t>(blockIdx.x) * kGroups; o0 < K; o0 += o_step) {
    const int64_t o = o0 + group;
    A acc = identity<C, A>();
    if (o < K) {
      const T* base = x + offset_of(kept, o);
      if (contiguous) {
        if (r_end > r_begin) acc = fold_contiguous<C, G>(base + r_begin, r_end - r_begin, lane, acc);
      } else {
        for (int64_t r = r_begin + lane; r < r_end; r += G)
          acc = combine<C>(acc, convert<A>(base[offset_of(reduced, r)]));
      }
    }
    if constexpr (G == kWarp) acc = warp_reduce<C>(acc);  // o is uniform over the warp
    else acc = block_reduce<C>(acc, scratch);
    if (lane == 0 && o < K)
      store_result<T, Final>(out, Final ? o : static_cast<int64_t>(blockIdx.y) * K + o, acc, scale);
  }
}

// reduce_forward, columns (and the fold of partials): x strided as above, of type In (T, or
// acc_t<T> for partials); out as reduce_rows_kernel. Block (32, 8): threadIdx.x owns output
// o = tile * 32 + threadIdx.x, threadIdx.y strides over r; the 8 partial folds of an output
// are combined in threadIdx.y order through shared memory.
template <typename In, typename T, typename Index, Combine C, bool Final>
__global__ void __launch_bounds__(kColumnTile * kColumnRows) reduce_columns_kernel(
    const In* x, void* out, OffsetCalculator<1, Index> kept, OffsetCalculator<1, Index> reduced, int64_t K, int64_t R,
    int64_t chunk, double scale) {
  using A = acc_t<T>;
  __shared__ A part[kColumnRows][kColumnTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r_begin = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t r_end = r_begin + chunk < R ? r_begin + chunk : R;
  const int64_t tiles = (K + kColumnTile - 1) / kColumnTile;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // uniform over the block
    const int64_t o = tile * kColumnTile + tx;
    A acc = identity<C, A>();
    if (o < K) {
      const In* base = x + offset_of(kept, o);
      if (reduced.ndim == 1) {
        const int64_t stride = reduced.strides[0][0];
        for (int64_t r = r_begin + ty; r < r_end; r += kColumnRows) acc = combine<C>(acc, convert<A>(base[r * stride]));
      } else {
        for (int64_t r = r_begin + ty; r < r_end; r += kColumnRows)
          acc = combine<C>(acc, convert<A>(base[offset_of(reduced, r)]));
      }
    }
    part[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && o < K) {
#pragma unroll
      for (int j = 1; j < kColumnRows; ++j) acc = combine<C>(acc, part[j][tx]);
      store_result<T, Final>(out, Final ? o : static_cast<int64_t>(blockIdx.y) * K + o, acc, scale);
    }
    __syncthreads();  // part is rewritten by the next tile
  }
}

// True when candidate (v, i) beats (best_v, best_i): i = -1 means "no candidate yet" (NaNs are
// never candidates); larger value wins, the smaller index on ties.
template <typename A>
__device__ __forceinline__ bool argmax_better(A v, int64_t i, A best_v, int64_t best_i) {
  return i >= 0 && (best_i < 0 || v > best_v || (v == best_v && i < best_i));
}

template <typename A>
__device__ __forceinline__ void argmax_warp(A& v, int64_t& i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const A ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (argmax_better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

// argmax_rows_forward: x [rows, cols] contiguous, out [rows] int64. G threads (a warp or the
// 256-thread block) per row. The CPU's scan keeps best while !(x[n] > x[best]), so: NaN at
// n = 0 gives 0, other NaNs are skipped, else the first maximum of the non-NaN values.
template <typename T, int G>
__global__ void __launch_bounds__(kThreads) argmax_rows_kernel(const T* x, int64_t rows, int64_t cols, int64_t* out) {
  using A = acc_t<T>;
  static_assert(G == kWarp || G == kThreads, "a warp or a block per row");
  constexpr int kGroups = kThreads / G;
  __shared__ A shared_v[32];
  __shared__ int64_t shared_i[32];
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const int64_t m_step = static_cast<int64_t>(gridDim.x) * kGroups;
  for (int64_t m0 = static_cast<int64_t>(blockIdx.x) * kGroups; m0 < rows; m0 += m_step) {
    const int64_t m = m0 + group;
    A best = A(0);
    int64_t best_i = -1;
    if (m < rows) {
      const T* row = x + m * cols;
      for (int64_t n = lane; n < cols; n += G) {  // n increasing: strict > keeps the first
        const A v = convert<A>(row[n]);
        if (v == v && (best_i < 0 || v > best)) {
          best = v;
          best_i = n;
        }
      }
    }
    argmax_warp(best, best_i);
    if constexpr (G == kThreads) {
      const int wl = threadIdx.x & 31, warp = threadIdx.x >> 5;
      __syncthreads();
      if (wl == 0) {
        shared_v[warp] = best;
        shared_i[warp] = best_i;
      }
      __syncthreads();
      best = wl < kThreads / kWarp ? shared_v[wl] : A(0);
      best_i = wl < kThreads / kWarp ? shared_i[wl] : -1;
      argmax_warp(best, best_i);
    }
    if (lane == 0 && m < rows) {
      const bool first_is_nan = cols > 0 && convert<A>(x[m * cols]) != convert<A>(x[m * cols]);
      out[m] = (best_i < 0 || first_is_nan) ? 0 : best_i;
    }
  }
}

// ---- Planning ---------------------------------------------------------------------------------

enum class Mode { WarpRows, BlockRows, Columns };

struct Plan {
  Mode mode = Mode::BlockRows;
  int64_t splits = 1;  // blocks along the reduced range per output (gridDim.y)
  int64_t chunk = 0;   // reduced elements per split
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

Plan make_plan(const ReduceProblem& p) {
  const int64_t K = p.kept_numel, R = p.reduced_numel;
  Plan plan;
  plan.chunk = R;
  bool columns = false;
  if (p.kept.ndim > 0) {
    // Columns when consecutive outputs are closer in memory than consecutive reduced elements
    // (and there are enough outputs to fill a warp's worth of loads), or nothing is reduced.
    columns = p.reduced.ndim == 0 ||
              (K >= 8 && std::llabs(p.kept.strides[0][0]) < std::llabs(p.reduced.strides[0][0]));
  }
  if (columns) {
    plan.mode = Mode::Columns;
    const int64_t tiles = ceil_div(K, kColumnTile);
    if (tiles < kTargetBlocks && R >= 2 * kMinColumnSplit)
      plan.splits = clamp64(std::min(ceil_div(kTargetBlocks, tiles), R / kMinColumnSplit), 1, kMaxSplits);
    if (plan.splits > 1) {
      plan.chunk = ceil_div(R, plan.splits);
      plan.splits = ceil_div(R, plan.chunk);
    }
  } else if (R <= kWarpRowMax) {
    plan.mode = Mode::WarpRows;
  } else {
    plan.mode = Mode::BlockRows;
    if (K < kTargetBlocks && R >= 2 * kMinRowSplit)
      plan.splits = clamp64(std::min(ceil_div(kTargetBlocks, K), R / kMinRowSplit), 1, kMaxSplits);
    if (plan.splits > 1) {
      // Chunks of a multiple of 16 elements: every chunk of a contiguous row starts at the same
      // 16-byte phase as the row.
      plan.chunk = ceil_div(ceil_div(R, plan.splits), 16) * 16;
      plan.splits = ceil_div(R, plan.chunk);
    }
  }
  if (plan.splits <= 1) {
    plan.splits = 1;
    plan.chunk = R;
  }
  return plan;
}

size_t acc_size(DType dtype) { return dtype == DType::Float64 ? sizeof(double) : sizeof(float); }

// int32 offsets when every index and offset fits.
bool fits_int32(const ReduceProblem& p) {
  constexpr int64_t kLimit = INT32_MAX;
  if (p.kept_numel > kLimit || p.reduced_numel > kLimit) return false;
  int64_t extent = 0;
  for (const StridedShape<1>* s : {&p.kept, &p.reduced})
    for (int d = 0; d < s->ndim; ++d) extent += (s->sizes[d] - 1) * std::llabs(s->strides[0][d]);
  return extent <= kLimit;
}

template <typename T, Combine C, typename Index>
void run_reduce(const T* x, void* out, void* scratch, const ReduceProblem& p, const Plan& plan, cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t K = p.kept_numel, R = p.reduced_numel;
  const OffsetCalculator<1, Index> kept = make_offset_calculator<1, Index>(p.kept);
  const OffsetCalculator<1, Index> reduced = make_offset_calculator<1, Index>(p.reduced);
  const bool final_stage = plan.splits == 1;
  const unsigned splits = static_cast<unsigned>(plan.splits);
  const dim3 column_block(kColumnTile, kColumnRows);
  switch (plan.mode) {
    case Mode::Columns: {
      const dim3 grid(static_cast<unsigned>(std::min(ceil_div(K, kColumnTile), kMaxBlocks)), splits);
      if (final_stage)
        reduce_columns_kernel<T, T, Index, C, true>
            <<<grid, column_block, 0, stream>>>(x, out, kept, reduced, K, R, plan.chunk, p.scale);
      else
        reduce_columns_kernel<T, T, Index, C, false>
            <<<grid, column_block, 0, stream>>>(x, scratch, kept, reduced, K, R, plan.chunk, p.scale);
      break;
    }
    case Mode::WarpRows: {  // never split
      const dim3 grid(static_cast<unsigned>(std::min(ceil_div(K, kThreads / kWarp), kMaxBlocks)), 1);
      reduce_rows_kernel<T, Index, C, kWarp, true>
          <<<grid, kThreads, 0, stream>>>(x, out, kept, reduced, K, R, plan.chunk, p.scale);
      break;
    }
    case Mode::BlockRows: {
      const dim3 grid(static_cast<unsigned>(std::min(K, kMaxBlocks)), splits);
      if (final_stage)
        reduce_rows_kernel<T, Index, C, kThreads, true>
            <<<grid, kThreads, 0, stream>>>(x, out, kept, reduced, K, R, plan.chunk, p.scale);
      else
        reduce_rows_kernel<T, Index, C, kThreads, false>
            <<<grid, kThreads, 0, stream>>>(x, scratch, kept, reduced, K, R, plan.chunk, p.scale);
      break;
    }
  }
  if (final_stage) return;
  // Fold the partials [splits, K] (contiguous, in A) of each output, in split order.
  StridedShape<1> part_kept, part_reduced;
  part_kept.ndim = 1;
  part_kept.sizes[0] = K;
  part_kept.strides[0][0] = 1;
  part_reduced.ndim = 1;
  part_reduced.sizes[0] = plan.splits;
  part_reduced.strides[0][0] = K;
  const dim3 grid(static_cast<unsigned>(std::min(ceil_div(K, kColumnTile), kMaxBlocks)), 1);
  reduce_columns_kernel<A, T, int64_t, C, true><<<grid, column_block, 0, stream>>>(
      static_cast<const A*>(scratch), out, make_offset_calculator<1, int64_t>(part_kept),
      make_offset_calculator<1, int64_t>(part_reduced), K, plan.splits, plan.splits, p.scale);
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

size_t reduce_scratch_bytes(const ReduceProblem& problem, DType dtype) {
  if (problem.kept_numel == 0) return 0;
  const Plan plan = make_plan(problem);
  return plan.splits > 1 ? static_cast<size_t>(plan.splits * problem.kept_numel) * acc_size(dtype) : 0;
}

cudaError_t launch_reduce(const void* x, void* out, void* scratch, const ReduceProblem& problem, DType dtype,
                          cudaStream_t stream) {
  if (problem.kept_numel == 0) return cudaSuccess;
  const Plan plan = make_plan(problem);
  if (plan.splits > 1 && scratch == nullptr) return cudaErrorInvalidValue;
  const bool narrow = fits_int32(problem);
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    auto run = [&](auto combine_tag) {
      constexpr Combine C = decltype(combine_tag)::value;
      if (narrow) run_reduce<T, C, int32_t>(xp, out, scratch, problem, plan, stream);
      else run_reduce<T, C, int64_t>(xp, out, scratch, problem, plan, stream);
    };
    switch (problem.op) {
      case ReduceKind::Sum:
      case ReduceKind::Mean: run(std::integral_constant<Combine, Combine::Sum>{}); break;
      case ReduceKind::Max: run(std::integral_constant<Combine, Combine::Max>{}); break;
      case ReduceKind::Min: run(std::integral_constant<Combine, Combine::Min>{}); break;
    }
  });
  return cudaGetLastError();
}

cudaError_t launch_argmax_rows(const void* x, DType dtype, int64_t rows, int64_t cols, int64_t* out,
                               cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = static_cast<const T*>(x);
    if (cols <= kArgmaxWarpMax) {
      const unsigned blocks = static_cast<unsigned>(std::min(ceil_div(rows, kThreads / kWarp), kMaxBlocks));
      argmax_rows_kernel<T, kWarp><<<blocks, kThreads, 0, stream>>>(xp, rows, cols, out);
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min(rows, kMaxBlocks));
      argmax_rows_kernel<T, kThreads><<<blocks, kThreads, 0, stream>>>(xp, rows, cols, out);
    }
  });
  return cudaGetLastError();
}

}  // namespace dp::cuda
