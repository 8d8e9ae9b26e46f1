// Device-side helpers shared by the kernel files (*.cu only): launch geometry, element
// conversions, dtype dispatch, strided offsets, accumulation types, 16-byte vector access, warp
// and block reductions, and the device-error record. Everything is a template or inline, so
// each .cu gets its own copy (no relocatable device code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda::device {

// ---- Launch geometry --------------------------------------------------------------------------

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; grid-stride loops cover the rest.
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

inline unsigned blocks_for(int64_t numel, int threads = kThreads) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((numel + threads - 1) / threads, kMaxBlocks)));
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// ---- Element types and conversions (the CPU backend's convert<To>(From), cpu_dispatch.h) ------

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
__host__ __device__ __forceinline__ float half_to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}

template <typename T>
__host__ __device__ __forceinline__ T float_to_half(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

// 16-bit types convert through float (round to nearest even), bool is "!= 0 as float".
template <typename To, typename From>
__host__ __device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half_v<From>) {
    return convert<To>(half_to_float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (is_half_v<To>) {
    return float_to_half<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// The type arithmetic on T is done in: float for float16/bfloat16/float32, double for float64.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Calls fn(T{}) with the device element type of `dtype`.
template <typename Fn>
void dispatch_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(float{}); return;
    case DType::Float64: fn(double{}); return;
    case DType::Float16: fn(__half{}); return;
    case DType::BFloat16: fn(__nv_bfloat16{}); return;
    case DType::Int32: fn(int32_t{}); return;
    case DType::Int64: fn(int64_t{}); return;
    case DType::UInt8: fn(uint8_t{}); return;
    case DType::Bool: fn(bool{}); return;
  }
}

// Floating dtypes only; the front-end checks CudaBackend::supports() before launching, so
// another dtype here launches nothing and returns false.
template <typename Fn>
bool dispatch_floating_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(float{}); return true;
    case DType::Float64: fn(double{}); return true;
    case DType::Float16: fn(__half{}); return true;
    case DType::BFloat16: fn(__nv_bfloat16{}); return true;
    default: return false;
  }
}

// ---- 16-byte vector access --------------------------------------------------------------------

// kVec<T> elements of T fill 16 bytes (4 floats, 2 doubles, 8 halves).
template <typename T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T)) > 0 ? 16 / static_cast<int>(sizeof(T)) : 1;

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

// True when every pointer is 16-byte aligned: the vector path may then be used for the first
// numel / kVec * kVec elements and a scalar tail for the rest.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// ---- Strided offsets --------------------------------------------------------------------------

// Flat index → element offsets of N operands. Index is int32_t when every offset fits (integer
// division is several times cheaper in 32 bits), else int64_t.
template <int N, typename Index>
struct OffsetCalculator {
  int32_t ndim;
  Index sizes[kMaxDims];
  Index strides[N][kMaxDims];

  __device__ __forceinline__ void offsets(Index linear, Index (&out)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const Index next = linear / sizes[d];
      const Index coord = linear - next * sizes[d];
      linear = next;
#pragma unroll
      for (int k = 0; k < N; ++k) out[k] += coord * strides[k][d];
    }
  }
};

template <int N, typename Index>
OffsetCalculator<N, Index> make_offset_calculator(const StridedShape<N>& shape) {
  OffsetCalculator<N, Index> calc{};
  calc.ndim = shape.ndim;
  for (int d = 0; d < shape.ndim; ++d) {
    calc.sizes[d] = static_cast<Index>(shape.sizes[d]);
    for (int k = 0; k < N; ++k) calc.strides[k][d] = static_cast<Index>(shape.strides[k][d]);
  }
  return calc;
}

template <int N>
bool offsets_fit_int32(const StridedShape<N>& shape, int64_t numel) {
  constexpr int64_t kLimit = INT32_MAX;
  if (numel > kLimit) return false;
  for (int k = 0; k < N; ++k) {
    int64_t extent = 0;
    for (int d = 0; d < shape.ndim; ++d) extent += (shape.sizes[d] - 1) * std::llabs(shape.strides[k][d]);
    if (extent > kLimit) return false;
  }
  return true;
}

// True when the (merged) loop is one dim with unit stride in every operand, or empty.
template <int N>
bool is_contiguous(const StridedShape<N>& shape) {
  if (shape.ndim > 1) return false;
  for (int k = 0; k < N; ++k)
    if (shape.ndim == 1 && shape.strides[k][0] != 1) return false;
  return true;
}

// Calls launch(calc) with the narrowest index type that fits.
template <int N, typename Launch>
void with_offset_calculator(const StridedShape<N>& shape, int64_t numel, Launch&& launch) {
  if (offsets_fit_int32(shape, numel)) launch(make_offset_calculator<N, int32_t>(shape));
  else launch(make_offset_calculator<N, int64_t>(shape));
}

// ---- Reductions -------------------------------------------------------------------------------

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 values of A in shared memory. The call begins with a barrier, so it may be
// called repeatedly with the same scratch; it does not end with one: other writes to scratch
// after it need a __syncthreads() first (threads may still be reading it).
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : A(0);
  return warp_sum(v);
}

// Max over the block, as block_sum; lanes past the last warp contribute -inf.
template <typename A>
__device__ __forceinline__ A block_max(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : A(-INFINITY);
  return warp_max(v);
}

// ---- Device errors (NOTE [ Device errors ], kernel_types.h) -----------------------------------

// Records the first error; later ones (from any thread or kernel) are dropped until the host
// has reported and cleared it.
__device__ __forceinline__ void record_device_error(DeviceErrors* errors, DeviceErrorCode code, int64_t value,
                                                    int64_t bound, int64_t where) {
  if (atomicCAS(&errors->claimed, 0, 1) != 0) return;
  errors->value = value;
  errors->bound = bound;
  errors->where = where;
  __threadfence_system();
  atomicExch(&errors->code, static_cast<int32_t>(code));
}

}  // namespace dp::cuda::device
