// CUDA kernels of the optimiser family: fused SGD / AdamW / LAMB-direction / LARS updates over
// flat buffers, multi-tensor squared norms, and the device-resident step helpers (LARS trust
// ratios, the clipping coefficient). Launchers are declared in optim_kernels.h.
//
// Updates: float32 and float64 only (CudaBackend::supports), computed in the element type as the
// CPU backend does, every operation written with a round-to-nearest intrinsic so that nvcc cannot
// contract it differently from the CPU build (NOTE [ Optimiser rounding ], optim_kernels.h).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/optim_kernels.h"

namespace dp::cuda {

namespace {

using device::first_index;
using device::grid_stride;
using device::kThreads;
using device::kVec;
using device::Vec;

// ---- Round-to-nearest arithmetic that nvcc never fuses ----------------------------------------

namespace rn {
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt(double a) { return __dsqrt_rn(a); }
// a·b + c with one rounding (what the CPU's vfmadd computes).
__device__ __forceinline__ float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return __fma_rn(a, b, c); }
}  // namespace rn

__device__ __forceinline__ bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- The multi-tensor elementwise driver -------------------------------------------------------

// NB flat buffers of T (a buffer the op does not use may be null).
template <typename T, int NB>
struct Buffers {
  T* p[NB];
};

// What an update reads per tensor from device memory (NOTE [ Device-resident optimiser step ]):
// its step count and its trust ratio, each null when the host's value applies.
struct TensorControl {
  const int64_t* step_count;
  const double* trust;
};

// One element's (or one 16-byte vector's) update: loads the slots in kLoad (the others read as 0),
// runs op on each element's values x[0..NB), stores the slots in kStore. A slot written but not
// read may hold uninitialised memory: it is never loaded.
template <typename T, int NB, unsigned kLoad, unsigned kStore, typename Op>
__device__ __forceinline__ void update_vector(const Buffers<T, NB>& bufs, int64_t j, const Op& o) {
  constexpr int V = kVec<T>;
  using VecT = Vec<T, V>;
  VecT x[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    if ((kLoad >> k) & 1u) {
      x[k] = reinterpret_cast<const VecT*>(bufs.p[k])[j];
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) x[k].v[e] = T(0);
    }
  }
#pragma unroll
  for (int e = 0; e < V; ++e) {
    T vals[NB];
#pragma unroll
    for (int k = 0; k < NB; ++k) vals[k] = x[k].v[e];
    o(vals);
#pragma unroll
    for (int k = 0; k < NB; ++k) x[k].v[e] = vals[k];
  }
#pragma unroll
  for (int k = 0; k < NB; ++k)
    if ((kStore >> k) & 1u) reinterpret_cast<VecT*>(bufs.p[k])[j] = x[k];
}

template <typename T, int NB, unsigned kLoad, unsigned kStore, typename Op>
__device__ __forceinline__ void update_element(const Buffers<T, NB>& bufs, int64_t i, const Op& o) {
  T vals[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) vals[k] = ((kLoad >> k) & 1u) ? bufs.p[k][i] : T(0);
  o(vals);
#pragma unroll
  for (int k = 0; k < NB; ++k)
    if ((kStore >> k) & 1u) bufs.p[k][i] = vals[k];
}

// Elements of one tile, the work of one block: 4 vectors per thread (a multiple of every V).
template <typename T>
constexpr int64_t kTileElems = int64_t(kThreads) * kVec<T> * 4;

// Up to kMultiTensorChunk nonempty tensors of one launch, passed by value. Tensor k's tiles are
// the blocks [tile_begin[k], tile_begin[k + 1]) (strictly increasing: every tensor has a tile).
constexpr int kMulti = kMultiTensorChunk;
template <typename T, int NB>
struct MultiChunk {
  T* p[kMulti][NB];
  int64_t numel[kMulti];
  const int64_t* step_count[kMulti];
  const double* trust[kMulti];
  int32_t tile_begin[kMulti + 1];
  uint8_t aligned[kMulti];  // every used buffer 16-byte aligned: the vector path
  int32_t count;
};

// multi_update_kernel: one block per tile of the chunk's tensors. The block's tensor is found by
// a binary search of tile_begin (the same in every thread), its op prepared with the tensor's
// step count and trust, then the tile's elements [begin, begin + len) are updated by the block's
// threads: 16-byte vectors when the tensor is aligned (a tile starts on a vector boundary), one
// by one otherwise and for the tensor's last len % V elements. Each element's update is the
// same operation whichever thread or tile computes it, so the result does not depend on how the
// tensors are chunked or tiled.
//   found_inf: float32 in device memory or null; nonzero → the kernel writes nothing.
template <typename T, int NB, unsigned kLoad, unsigned kStore, typename Op>
__global__ void __launch_bounds__(kThreads)
    multi_update_kernel(const __grid_constant__ MultiChunk<T, NB> c, const Op op, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;  // uniform across the grid
  const int32_t block = static_cast<int32_t>(blockIdx.x);
  int lo = 0, hi = c.count;  // the largest k with tile_begin[k] <= block
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (c.tile_begin[mid] <= block) lo = mid;
    else hi = mid;
  }
  const int k = lo;
  constexpr int64_t kTile = kTileElems<T>;
  const int64_t begin = static_cast<int64_t>(block - c.tile_begin[k]) * kTile;
  const int64_t remaining = c.numel[k] - begin;
  const int64_t len = remaining < kTile ? remaining : kTile;
  Buffers<T, NB> bufs;
#pragma unroll
  for (int b = 0; b < NB; ++b) bufs.p[b] = c.p[k][b] != nullptr ? c.p[k][b] + begin : nullptr;
  const Op o = op.prepared(TensorControl{c.step_count[k], c.trust[k]});
  constexpr int V = kVec<T>;
  const int64_t vec_len = c.aligned[k] ? len / V * V : 0;
  for (int64_t j = threadIdx.x; j < vec_len / V; j += blockDim.x) update_vector<T, NB, kLoad, kStore>(bufs, j, o);
  for (int64_t i = vec_len + threadIdx.x; i < len; i += blockDim.x) update_element<T, NB, kLoad, kStore>(bufs, i, o);
}

// Launches multi_update_kernel over tensors[0..count): validates them all first (nothing is
// queued for a bad list), passes over empty ones, and launches once per kMulti nonempty tensors.
// device_steps: every tensor has a step count (else none may have one).
template <typename T, int NB, unsigned kLoad, unsigned kStore, typename Op>
cudaError_t launch_multi(const MultiTensor* tensors, int64_t count, const Op& op, bool device_steps,
                         const float* found_inf, cudaStream_t stream) {
  static_assert(NB <= 5, "MultiTensor has five buffer slots");
  static_assert(sizeof(MultiChunk<T, NB>) + sizeof(Op) + sizeof(found_inf) <= 4000,
                "kernel parameters must stay under 4 KB");
  constexpr unsigned kUsed = kLoad | kStore;
  constexpr int64_t kTile = kTileElems<T>;
  if (count < 0 || (count > 0 && tensors == nullptr)) return cudaErrorInvalidValue;
  for (int64_t t = 0; t < count; ++t) {
    const MultiTensor& x = tensors[t];
    if (x.numel < 0 || (x.step_count != nullptr) != device_steps) return cudaErrorInvalidValue;
    if (x.numel > int64_t(INT32_MAX / 2) * kTile) return cudaErrorInvalidValue;  // its tiles fit an int32
    for (int b = 0; b < NB; ++b)
      if (((kUsed >> b) & 1u) && x.numel > 0 && x.buffers[b] == nullptr) return cudaErrorInvalidValue;
  }
  MultiChunk<T, NB> c{};
  int64_t tiles = 0;
  auto flush = [&]() -> cudaError_t {
    if (c.count == 0) return cudaSuccess;
    c.tile_begin[c.count] = static_cast<int32_t>(tiles);
    multi_update_kernel<T, NB, kLoad, kStore, Op><<<static_cast<unsigned>(tiles), kThreads, 0, stream>>>(c, op, found_inf);
    c = MultiChunk<T, NB>{};
    tiles = 0;
    return cudaGetLastError();
  };
  for (int64_t t = 0; t < count; ++t) {
    const MultiTensor& x = tensors[t];
    if (x.numel == 0) continue;
    const int64_t x_tiles = (x.numel + kTile - 1) / kTile;
    if (c.count == kMulti || tiles + x_tiles > INT32_MAX) {
      const cudaError_t status = flush();
      if (status != cudaSuccess) return status;
    }
    const int k = c.count++;
    bool aligned = true;
    for (int b = 0; b < NB; ++b) {
      if (((kUsed >> b) & 1u) == 0) continue;  // unused slot: stays null
      c.p[k][b] = static_cast<T*>(x.buffers[b]);
      aligned = aligned && device::aligned16(x.buffers[b]);
    }
    c.numel[k] = x.numel;
    c.step_count[k] = x.step_count;
    c.trust[k] = x.device_trust;
    c.aligned[k] = aligned ? 1 : 0;
    c.tile_begin[k] = static_cast<int32_t>(tiles);
    tiles += x_tiles;
  }
  return flush();
}

template <typename Fn>
cudaError_t dispatch_update_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    default: return cudaErrorInvalidValue;  // the front-end checks supports() first
  }
}

// One tensor as a MultiTensor (the single-tensor launchers).
MultiTensor one_tensor(std::initializer_list<const void*> buffers, int64_t numel, const int64_t* step_count,
                       const double* device_trust) {
  MultiTensor x;
  int b = 0;
  for (const void* p : buffers) x.buffers[b++] = const_cast<void*>(p);
  x.numel = numel;
  x.step_count = step_count;
  x.device_trust = device_trust;
  return x;
}

// ---- SGD --------------------------------------------------------------------------------------

// sgd_update: slots 0 = param (T [n], read/written), 1 = grad (T [n], read), 2 = momentum_buf
// (T [n]; unused without momentum, written only on the first step, else read and written).
//   d = g + wd·p;  b = first ? d : mom·b + (1 − dampening)·d;  d = nesterov ? d + mom·b : b;
//   p −= lr·d
// With a device step count (kFirst false) the first step is decided per tensor on the device
// (`first`), the buffer then being loaded but not used.
template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
struct SgdOp {
  T lr, wd, mom, damp;
  bool first;
  DeviceControl control;  // its step_count unused: the tensor's comes with prepared()
  __device__ __forceinline__ SgdOp prepared(const TensorControl& t) const {
    SgdOp o = *this;
    if (control.lr != nullptr) o.lr = T(__dmul_rn(*control.lr, control.lr_scale));
    if (t.step_count != nullptr) o.first = *t.step_count == 0;
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[3]) const {
    T d = rn::fma(wd, x[0], x[1]);
    if constexpr (kMomentum) {
      T b;
      if constexpr (kFirst) b = d;
      else b = first ? d : rn::fma(mom, x[2], rn::mul(damp, d));
      x[2] = b;
      if constexpr (kNesterov) d = rn::fma(mom, b, d);
      else d = b;
    }
    x[0] = rn::fma(-lr, d, x[0]);
  }
};

template <typename T, bool kMomentum, bool kFirst, bool kNesterov>
cudaError_t launch_sgd_typed(const MultiTensor* tensors, int64_t count, bool device_steps, const SgdScalars& s,
                             cudaStream_t stream) {
  const SgdOp<T, kMomentum, kFirst, kNesterov> op{T(s.lr), T(s.weight_decay), T(s.momentum), T(1.0 - s.dampening),
                                                  false, s.control};
  constexpr unsigned kLoad = kMomentum && !kFirst ? 0b111u : 0b011u;
  constexpr unsigned kStore = kMomentum ? 0b101u : 0b001u;
  return launch_multi<T, 3, kLoad, kStore>(tensors, count, op, device_steps, s.control.found_inf, stream);
}

// ---- AdamW and LAMB ---------------------------------------------------------------------------

// The AdamScalars cast once to T, as the CPU's AdamConstants<T>.
template <typename T>
struct AdamConstants {
  T b1, one_minus_b1, b2, one_minus_b2, eps, inv_divisor, divisor, step_size, bc1, bc2, bc2_sqrt, wd, lr_wd;
  bool divide;
};

// The scalars that depend on lr and step, recomputed on the device from the control's lr and the
// tensor's step count with the host's formulas (optim.cpp's adam_scalars; pow on the device may
// differ from the host's by an ulp of the bias correction).
template <typename T>
__device__ __forceinline__ void refresh_from_control(AdamConstants<T>& c, const AdamScalars& s,
                                                     const int64_t* step_count) {
  const DeviceControl& ctl = s.control;
  if (ctl.lr == nullptr && step_count == nullptr) return;
  const double lr = ctl.lr != nullptr ? __dmul_rn(*ctl.lr, ctl.lr_scale) : s.lr;
  const double step = static_cast<double>(step_count != nullptr ? *step_count + 1 : s.step);
  const double bc1 = __dsub_rn(1.0, pow(s.beta1, step));
  const double bc2 = __dsub_rn(1.0, pow(s.beta2, step));
  c.step_size = T(__ddiv_rn(lr, bc1));
  c.bc1 = T(bc1);
  c.bc2 = T(bc2);
  c.bc2_sqrt = T(__dsqrt_rn(bc2));
  c.lr_wd = T(__dmul_rn(lr, s.weight_decay));
}

template <typename T>
AdamConstants<T> adam_constants(const AdamScalars& s) {
  AdamConstants<T> c;
  c.b1 = T(s.beta1), c.one_minus_b1 = T(s.one_minus_beta1), c.b2 = T(s.beta2), c.one_minus_b2 = T(s.one_minus_beta2);
  c.eps = T(s.eps), c.inv_divisor = T(s.inv_divisor), c.divisor = T(s.divisor), c.step_size = T(s.step_size);
  c.bc1 = T(s.bc1), c.bc2 = T(s.bc2), c.bc2_sqrt = T(s.bc2_sqrt), c.wd = T(s.weight_decay), c.lr_wd = T(s.lr_wd);
  c.divide = s.divide;
  return c;
}

// adamw_update: slots 0 = param (T [n], read/written), 1 = grad (T [n], read), 2 = exp_avg and
// 3 = exp_avg_sq (T [n], read/written).
//   g' = divide ? g·(1/divisor) : g;  m = b1·m + (1−b1)·g';  v = b2·v + (1−b2)·g'·g';
//   p = p − (lr·wd)·p − step_size·m / (√v / √bc2 + eps)
template <typename T>
struct AdamwOp {
  AdamConstants<T> c;
  AdamScalars s;
  __device__ __forceinline__ AdamwOp prepared(const TensorControl& t) const {
    AdamwOp o = *this;
    refresh_from_control(o.c, s, t.step_count);
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[4]) const {
    const T g = c.divide ? rn::mul(x[1], c.inv_divisor) : x[1];
    const T m = rn::fma(c.b1, x[2], rn::mul(c.one_minus_b1, g));
    const T v = rn::fma(c.b2, x[3], rn::mul(rn::mul(c.one_minus_b2, g), g));
    x[2] = m;
    x[3] = v;
    const T decayed = rn::fma(-c.lr_wd, x[0], x[0]);
    const T denom = rn::add(rn::div(rn::sqrt(v), c.bc2_sqrt), c.eps);
    x[0] = rn::sub(decayed, rn::div(rn::mul(c.step_size, m), denom));
  }
};

// lamb_direction: slots 0 = param (T [n], read), 1 = grad (T [n], read), 2 = exp_avg and
// 3 = exp_avg_sq (T [n], read/written), 4 = update (T [n], written).
//   g' = g / divisor;  m, v as AdamW;  u = (m/bc1) / (√(v/bc2) + eps) + wd·p
template <typename T>
struct LambOp {
  AdamConstants<T> c;
  AdamScalars s;
  __device__ __forceinline__ LambOp prepared(const TensorControl& t) const {
    LambOp o = *this;
    refresh_from_control(o.c, s, t.step_count);
    if (s.grad_norm != nullptr) {  // apex's global clipping, decided on the device
      const double norm = *s.grad_norm;
      o.c.divisor = T(norm > s.max_grad_norm ? __ddiv_rn(norm, s.max_grad_norm) : 1.0);
    }
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[5]) const {
    const T g = rn::div(x[1], c.divisor);
    const T m = rn::fma(c.b1, x[2], rn::mul(c.one_minus_b1, g));
    const T v = rn::fma(c.b2, x[3], rn::mul(rn::mul(c.one_minus_b2, g), g));
    x[2] = m;
    x[3] = v;
    const T direction = rn::div(rn::div(m, c.bc1), rn::add(rn::sqrt(rn::div(v, c.bc2)), c.eps));
    x[4] = rn::fma(c.wd, x[0], direction);
  }
};

// The lr and trust ratio of a trust-ratio update (LAMB's second stage, LARS): the host's, or
// the device's where the control's lr or a device trust ratio is given.
struct LrTrust {
  double lr, trust;
};
__device__ __forceinline__ LrTrust lr_and_trust(double lr, double trust, const double* device_trust,
                                                const DeviceControl& control) {
  return {control.lr != nullptr ? __dmul_rn(*control.lr, control.lr_scale) : lr,
          device_trust != nullptr ? *device_trust : trust};
}

// lamb_update: slots 0 = param (T [n], read/written), 1 = update (T [n], read).
//   p = p − T(lr·trust)·u, one rounding (the CPU's contracted p − s·u)
// The tensor's device trust and control.lr, when set, replace the host trust and lr (read once
// per thread).
template <typename T>
struct LambUpdateOp {
  T scaled_lr;
  double lr, trust;
  DeviceControl control;
  __device__ __forceinline__ LambUpdateOp prepared(const TensorControl& t) const {
    LambUpdateOp o = *this;
    if (t.trust == nullptr && control.lr == nullptr) return o;
    const LrTrust v = lr_and_trust(lr, trust, t.trust, control);
    o.scaled_lr = T(__dmul_rn(v.lr, v.trust));
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[2]) const { x[0] = rn::fma(-scaled_lr, x[1], x[0]); }
};

// ---- LARS -------------------------------------------------------------------------------------

// lars_update: slots 0 = param (T [n], read/written), 1 = grad (T [n], read), 2 = momentum_buf
// (T [n], read/written). d = g + wd·p;
//   lr inside:  b = mom·b − T(lr·trust)·d;  p += b
//   lr outside: b = mom·b + trust·d;        p −= lr·b
// The tensor's device trust (float64, device memory), when set, replaces the host trust (read once
// per thread).
template <typename T, bool kLrOutside>
struct LarsOp {
  T wd, mom, lr, trust, scaled_lr;
  double lr_double, trust_double;
  DeviceControl control;
  __device__ __forceinline__ LarsOp prepared(const TensorControl& t) const {
    LarsOp o = *this;
    if (t.trust == nullptr && control.lr == nullptr) return o;
    const LrTrust v = lr_and_trust(lr_double, trust_double, t.trust, control);
    o.trust = T(v.trust);
    o.lr = T(v.lr);
    o.scaled_lr = T(__dmul_rn(v.lr, v.trust));
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[3]) const {
    const T d = rn::fma(wd, x[0], x[1]);
    if constexpr (kLrOutside) {
      const T b = rn::fma(mom, x[2], rn::mul(trust, d));
      x[2] = b;
      x[0] = rn::fma(-lr, b, x[0]);
    } else {
      const T b = rn::fma(mom, x[2], -rn::mul(scaled_lr, d));
      x[2] = b;
      x[0] = rn::add(x[0], b);
    }
  }
};

// ---- Squared norms ----------------------------------------------------------------------------

// Up to 128 tensors of one squared_norms call, passed by value (about 3.3 KB, under the 4 KB
// classic parameter limit). Tensor k of the chunk is tensor first_tensor + k of the call; its
// slices (kNormSliceElems elements each, the last one shorter) are the global slice indices
// [slice_begin[k], slice_begin[k + 1]); partials has one float64 per global slice.
constexpr int kChunk = kNormChunkTensors;
struct NormChunk {
  const void* data[kChunk];
  int64_t numel[kChunk];
  int64_t slice_begin[kChunk + 1];
  double* partials;  // float64 [total slices of the call]
  int64_t* ranges;   // int64 [2 · count of the call]: each tensor's [first, end) slice
  int64_t first_tensor;
  int32_t count;
  uint8_t is_double[kChunk];
};
static_assert(sizeof(NormChunk) <= 4000, "kernel parameters must stay under 4 KB");
static_assert(kNormSliceElems % 4 == 0 && kNormSliceElems <= INT32_MAX, "slices are whole vectors");

// Σ p[i]², i in [0, len), over the block's threads with a fixed thread→element mapping; float64.
template <typename T>
__device__ __forceinline__ double slice_sum_of_squares(const T* p, int len) {
  constexpr int V = kVec<T>;
  using VecT = Vec<T, V>;
  double acc = 0;
  int scalar_begin = 0;
  if (is_aligned16(p)) {
    const int n_vec = len / V;
    const VecT* pv = reinterpret_cast<const VecT*>(p);
#pragma unroll 4
    for (int j = threadIdx.x; j < n_vec; j += blockDim.x) {
      const VecT x = pv[j];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const double d = static_cast<double>(x.v[e]);
        acc = __fma_rn(d, d, acc);
      }
    }
    scalar_begin = n_vec * V;
  }
  for (int i = scalar_begin + static_cast<int>(threadIdx.x); i < len; i += blockDim.x) {
    const double d = static_cast<double>(p[i]);
    acc = __fma_rn(d, d, acc);
  }
  return acc;
}

// squared_norm_partials_kernel: one block per slice of the chunk's tensors.
//   c.partials: float64 [total slices]; block b writes entry c.slice_begin[0] + b.
//   c.ranges:   int64 [2 · count]; block 0 writes each chunk tensor's slice range.
// The grid has max(1, slices of the chunk) blocks (a chunk of empty tensors still writes ranges).
__global__ void __launch_bounds__(kThreads) squared_norm_partials_kernel(const __grid_constant__ NormChunk c) {
  if (blockIdx.x == 0) {
    for (int k = threadIdx.x; k < c.count; k += blockDim.x) {
      c.ranges[2 * (c.first_tensor + k)] = c.slice_begin[k];
      c.ranges[2 * (c.first_tensor + k) + 1] = c.slice_begin[k + 1];
    }
  }
  const int64_t slice = c.slice_begin[0] + blockIdx.x;
  if (slice >= c.slice_begin[c.count]) return;  // block-uniform: no barrier is skipped by part of a block
  // The tensor owning `slice`: the largest k < count with slice_begin[k] <= slice (empty tensors
  // share their successor's begin and are passed over).
  int lo = 0, hi = c.count;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (c.slice_begin[mid] <= slice) lo = mid;
    else hi = mid;
  }
  const int64_t start = (slice - c.slice_begin[lo]) * kNormSliceElems;
  const int64_t remaining = c.numel[lo] - start;  // > 0: the slice belongs to the tensor
  const int len = static_cast<int>(remaining < kNormSliceElems ? remaining : kNormSliceElems);
  double acc;
  if (c.is_double[lo]) acc = slice_sum_of_squares(static_cast<const double*>(c.data[lo]) + start, len);
  else acc = slice_sum_of_squares(static_cast<const float*>(c.data[lo]) + start, len);
  __shared__ double scratch[32];
  acc = device::block_sum(acc, scratch);
  if (threadIdx.x == 0) c.partials[slice] = acc;
}

// squared_norm_finish_kernel: one warp per tensor sums its slices' partials in a fixed order.
//   partials: float64 [total slices]; ranges: int64 [2 · count]; out: float64 [count].
__global__ void __launch_bounds__(kThreads)
    squared_norm_finish_kernel(const double* partials, const int64_t* ranges, int64_t count, double* out) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (t >= count) return;  // warp-uniform: the shuffles below see full warps
  const int lane = threadIdx.x & 31;
  const int64_t begin = ranges[2 * t], end = ranges[2 * t + 1];
  double acc = 0;
  for (int64_t s = begin + lane; s < end; s += 32) acc += partials[s];
  acc = device::warp_sum(acc);
  if (lane == 0) out[t] = acc;
}

int64_t slices_of(int64_t numel) { return (numel + kNormSliceElems - 1) / kNormSliceElems; }

// ---- Device-resident step helpers -------------------------------------------------------------

// trust_ratios_kernel: squared_norms float64 [2n] (‖w‖², ‖g‖² pairs); weight_decay float64 [n]
// or null (uniform_weight_decay); ratios float64 [n] out. LARS::trust_ratio per parameter.
__global__ void __launch_bounds__(kThreads)
    trust_ratios_kernel(const double* squared_norms, const double* weight_decay, double uniform_weight_decay,
                        int64_t n, double eta, double eps, double* ratios) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const double w_norm = __dsqrt_rn(squared_norms[2 * i]);
    const double g_norm = __dsqrt_rn(squared_norms[2 * i + 1]);
    const double wd = weight_decay != nullptr ? weight_decay[i] : uniform_weight_decay;
    ratios[i] = (w_norm == 0 || g_norm == 0)
                    ? 1.0
                    : __ddiv_rn(__dmul_rn(eta, w_norm), __dadd_rn(__fma_rn(wd, w_norm, g_norm), eps));
  }
}

// clip_coefficient_kernel (one thread): squared_norms float64 [n]; out float64 [2] = (norm, clip);
// found_inf float32 [1] set to 1 when the norm is not finite. Sums in index order as global_norm.
__global__ void clip_coefficient_kernel(const double* squared_norms, int64_t n, double max_norm, double* out,
                                        float* found_inf) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double total = 0;
#pragma unroll 8
  for (int64_t i = 0; i < n; ++i) total = __dadd_rn(total, squared_norms[i]);
  const double norm = __dsqrt_rn(total);
  const bool finite = isfinite(norm);
  double coef = 1.0;
  if (finite) {
    const double c = __ddiv_rn(max_norm, __dadd_rn(norm, 1e-6));
    if (c < 1.0) coef = c;
  }
  out[0] = norm;
  out[1] = coef;
  if (!finite) *found_inf = 1.0f;
}

// scale_by: slot 0 = x (T [n], read/written); x ·= T(*factor).
template <typename T>
struct ScaleOp {
  const double* factor;
  T f;
  __device__ __forceinline__ ScaleOp prepared(const TensorControl&) const {
    ScaleOp o = *this;
    o.f = T(*factor);
    return o;
  }
  __device__ __forceinline__ void operator()(T (&x)[1]) const { x[0] = rn::mul(x[0], f); }
};

struct CounterChunk {
  int64_t* counters[kCounterChunk];
  int32_t count;
};

// count_steps_kernel: one thread per counter of the chunk (StepCounting as an int).
__global__ void count_steps_kernel(const __grid_constant__ CounterChunk c, const float* found_inf, int how) {
  const int k = static_cast<int>(threadIdx.x);
  if (k >= c.count) return;
  const bool found = found_inf != nullptr && *found_inf != 0.0f;
  int64_t& v = *c.counters[k];
  switch (how) {
    case 0: v += found ? 0 : 1; break;  // IfApplied
    case 1: v += found ? 1 : 0; break;  // IfSkipped
    case 2: v = found ? v + 1 : 0; break;  // SkipRun
    default: v += 1; break;  // Always
  }
}

__global__ void lr_lookup_kernel(const double* table, int64_t n, const int64_t* clock, double* out) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int64_t step = *clock;
  if (step < 0) step = 0;
  if (step > n - 1) step = n - 1;
  *out = table[step];
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

// Whether the tensors carry step counts (launch_multi checks that all or none do).
bool has_device_steps(const MultiTensor* tensors, int64_t count) {
  return count > 0 && tensors != nullptr && tensors[0].step_count != nullptr;
}

cudaError_t launch_sgd_update_multi(const MultiTensor* tensors, int64_t count, DType dtype, const SgdScalars& s,
                                    cudaStream_t stream) {
  const bool device_steps = has_device_steps(tensors, count);
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    if (s.momentum == 0.0) return launch_sgd_typed<T, false, false, false>(tensors, count, device_steps, s, stream);
    if (s.first_step && !device_steps) {
      return s.nesterov ? launch_sgd_typed<T, true, true, true>(tensors, count, device_steps, s, stream)
                        : launch_sgd_typed<T, true, true, false>(tensors, count, device_steps, s, stream);
    }
    return s.nesterov ? launch_sgd_typed<T, true, false, true>(tensors, count, device_steps, s, stream)
                      : launch_sgd_typed<T, true, false, false>(tensors, count, device_steps, s, stream);
  });
}

cudaError_t launch_adamw_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                      const AdamScalars& s, cudaStream_t stream) {
  const bool device_steps = has_device_steps(tensors, count);
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch_multi<T, 4, 0b1111u, 0b1101u>(tensors, count, AdamwOp<T>{adam_constants<T>(s), s}, device_steps,
                                                s.control.found_inf, stream);
  });
}

cudaError_t launch_lamb_direction_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                        const AdamScalars& s, cudaStream_t stream) {
  const bool device_steps = has_device_steps(tensors, count);
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch_multi<T, 5, 0b01111u, 0b11100u>(tensors, count, LambOp<T>{adam_constants<T>(s), s},
                                                  device_steps, s.control.found_inf, stream);
  });
}

cudaError_t launch_lamb_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                     const LambUpdateScalars& s, cudaStream_t stream) {
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const LambUpdateOp<T> op{T(s.lr * s.trust), s.lr, s.trust, s.control};  // lr·trust in double
    return launch_multi<T, 2, 0b11u, 0b01u>(tensors, count, op, false, s.control.found_inf, stream);
  });
}

cudaError_t launch_lars_update_multi(const MultiTensor* tensors, int64_t count, DType dtype,
                                     const LarsScalars& s, cudaStream_t stream) {
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    const double scaled_lr = s.lr * s.trust;  // rounded in double, then cast (as the CPU)
    if (s.lr_outside_momentum) {
      const LarsOp<T, true> op{T(s.weight_decay), T(s.momentum), T(s.lr), T(s.trust), T(scaled_lr),
                               s.lr,              s.trust,       s.control};
      return launch_multi<T, 3, 0b111u, 0b101u>(tensors, count, op, false, s.control.found_inf, stream);
    }
    const LarsOp<T, false> op{T(s.weight_decay), T(s.momentum), T(s.lr), T(s.trust), T(scaled_lr),
                              s.lr,              s.trust,       s.control};
    return launch_multi<T, 3, 0b111u, 0b101u>(tensors, count, op, false, s.control.found_inf, stream);
  });
}

// The single-tensor launchers: one MultiTensor each.

cudaError_t launch_sgd_update(void* param, const void* grad, void* momentum_buf, DType dtype, int64_t numel,
                              const SgdScalars& s, cudaStream_t stream) {
  const MultiTensor x = one_tensor({param, grad, momentum_buf}, numel, s.control.step_count, nullptr);
  return launch_sgd_update_multi(&x, 1, dtype, s, stream);
}

cudaError_t launch_adamw_update(void* param, const void* grad, void* exp_avg, void* exp_avg_sq, DType dtype,
                                int64_t numel, const AdamScalars& s, cudaStream_t stream) {
  const MultiTensor x = one_tensor({param, grad, exp_avg, exp_avg_sq}, numel, s.control.step_count, nullptr);
  return launch_adamw_update_multi(&x, 1, dtype, s, stream);
}

cudaError_t launch_lamb_direction(const void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                                  void* update, DType dtype, int64_t numel, const AdamScalars& s,
                                  cudaStream_t stream) {
  const MultiTensor x =
      one_tensor({param, grad, exp_avg, exp_avg_sq, update}, numel, s.control.step_count, nullptr);
  return launch_lamb_direction_multi(&x, 1, dtype, s, stream);
}

cudaError_t launch_lamb_update(void* param, const void* update, DType dtype, int64_t numel,
                               const LambUpdateScalars& s, cudaStream_t stream) {
  const MultiTensor x = one_tensor({param, update}, numel, nullptr, s.device_trust);
  return launch_lamb_update_multi(&x, 1, dtype, s, stream);
}

cudaError_t launch_lars_update(void* param, const void* grad, void* momentum_buf, DType dtype, int64_t numel,
                               const LarsScalars& s, cudaStream_t stream) {
  const MultiTensor x = one_tensor({param, grad, momentum_buf}, numel, nullptr, s.device_trust);
  return launch_lars_update_multi(&x, 1, dtype, s, stream);
}

size_t squared_norms_scratch_bytes(const NormInput* inputs, int64_t count) {
  int64_t slices = 0;
  for (int64_t k = 0; k < count; ++k) slices += slices_of(std::max<int64_t>(0, inputs[k].numel));
  return static_cast<size_t>(slices) * sizeof(double) + static_cast<size_t>(count) * 2 * sizeof(int64_t);
}

cudaError_t launch_squared_norms(const NormInput* inputs, int64_t count, double* out, void* scratch,
                                 size_t scratch_bytes, cudaStream_t stream) {
  if (count < 0) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  if (inputs == nullptr || out == nullptr || scratch == nullptr) return cudaErrorInvalidValue;
  int64_t total_slices = 0;
  for (int64_t k = 0; k < count; ++k) {
    const NormInput& x = inputs[k];
    if (x.numel < 0 || (x.dtype != DType::Float32 && x.dtype != DType::Float64)) return cudaErrorInvalidValue;
    if (x.numel > 0 && x.data == nullptr) return cudaErrorInvalidValue;
    total_slices += slices_of(x.numel);
  }
  if (scratch_bytes < squared_norms_scratch_bytes(inputs, count) || !device::aligned16(scratch))
    return cudaErrorInvalidValue;
  double* partials = static_cast<double*>(scratch);
  int64_t* ranges = reinterpret_cast<int64_t*>(partials + total_slices);

  int64_t slice_base = 0;
  for (int64_t first = 0; first < count; first += kChunk) {
    NormChunk c{};
    c.count = static_cast<int32_t>(std::min<int64_t>(kChunk, count - first));
    c.first_tensor = first;
    c.partials = partials;
    c.ranges = ranges;
    for (int k = 0; k < c.count; ++k) {
      const NormInput& x = inputs[first + k];
      c.data[k] = x.data;
      c.numel[k] = x.numel;
      c.is_double[k] = x.dtype == DType::Float64 ? 1 : 0;
      c.slice_begin[k] = slice_base;
      slice_base += slices_of(x.numel);
    }
    c.slice_begin[c.count] = slice_base;
    const int64_t chunk_slices = c.slice_begin[c.count] - c.slice_begin[0];
    if (chunk_slices > INT32_MAX) return cudaErrorInvalidValue;
    const unsigned blocks = static_cast<unsigned>(std::max<int64_t>(1, chunk_slices));
    squared_norm_partials_kernel<<<blocks, kThreads, 0, stream>>>(c);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  constexpr int kWarpsPerBlock = kThreads / 32;
  const int64_t finish_blocks = (count + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (finish_blocks > INT32_MAX) return cudaErrorInvalidValue;
  squared_norm_finish_kernel<<<static_cast<unsigned>(finish_blocks), kThreads, 0, stream>>>(partials, ranges, count,
                                                                                             out);
  return cudaGetLastError();
}

cudaError_t launch_trust_ratios(const double* squared_norms, const double* weight_decay, double uniform_weight_decay,
                                int64_t n, double eta, double eps, double* ratios, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (squared_norms == nullptr || ratios == nullptr) return cudaErrorInvalidValue;
  trust_ratios_kernel<<<device::blocks_for(n), kThreads, 0, stream>>>(squared_norms, weight_decay,
                                                                        uniform_weight_decay, n, eta, eps, ratios);
  return cudaGetLastError();
}

cudaError_t launch_clip_coefficient(const double* squared_norms, int64_t n, double max_norm, double* out,
                                    float* found_inf, cudaStream_t stream) {
  if (n < 0 || !(max_norm > 0) || out == nullptr || found_inf == nullptr) return cudaErrorInvalidValue;
  if (n > 0 && squared_norms == nullptr) return cudaErrorInvalidValue;
  clip_coefficient_kernel<<<1, 1, 0, stream>>>(squared_norms, n, max_norm, out, found_inf);
  return cudaGetLastError();
}

cudaError_t launch_scale_by(const MultiTensor* xs, int64_t count, DType dtype, const double* factor,
                            cudaStream_t stream) {
  if (factor == nullptr) return cudaErrorInvalidValue;
  return dispatch_update_dtype(dtype, [&](auto tag) -> cudaError_t {
    using T = decltype(tag);
    return launch_multi<T, 1, 0b1u, 0b1u>(xs, count, ScaleOp<T>{factor, T(1)}, false, nullptr, stream);
  });
}

cudaError_t launch_count_steps(int64_t* const* counters, int64_t count, const float* found_inf, int how,
                               cudaStream_t stream) {
  if (count < 0 || how < 0 || how > 3) return cudaErrorInvalidValue;
  for (int64_t first = 0; first < count; first += kCounterChunk) {
    CounterChunk c{};
    c.count = static_cast<int32_t>(std::min<int64_t>(kCounterChunk, count - first));
    for (int k = 0; k < c.count; ++k) {
      if (counters[first + k] == nullptr) return cudaErrorInvalidValue;
      c.counters[k] = counters[first + k];
    }
    count_steps_kernel<<<1, kCounterChunk, 0, stream>>>(c, found_inf, how);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t launch_lr_lookup(const double* table, int64_t n, const int64_t* clock, double* out, cudaStream_t stream) {
  if (n < 1 || table == nullptr || clock == nullptr || out == nullptr) return cudaErrorInvalidValue;
  lr_lookup_kernel<<<1, 1, 0, stream>>>(table, n, clock, out);
  return cudaGetLastError();
}

}  // namespace dp::cuda
