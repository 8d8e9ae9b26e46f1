// CUDA kernels for copies/casts, fills, arange, random numbers and scaling; launchers after the
// kernels. Every kernel is a grid-stride loop over a flat element index.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "runtime/backend/cuda/kernels.h"
#include "runtime/tensor/generator.h"

namespace dp::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current GPU several times over; the loops stride over the rest.
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

unsigned blocks_for(int64_t numel) {
  return static_cast<unsigned>(std::min<int64_t>((numel + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// ---- Element conversions (the CPU backend's convert<To>(From), cpu_dispatch.h) ----------------

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

template <typename T>
__host__ __device__ float half_to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else return __bfloat162float(v);
}

template <typename T>
__host__ __device__ T float_to_half(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return __float2bfloat16_rn(v);
}

// 16-bit types convert through float (round to nearest even), bool is "!= 0 as float".
template <typename To, typename From>
__host__ __device__ To convert(From v) {
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

template <typename Fn>
void dispatch_floating_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(float{}); return;
    case DType::Float64: fn(double{}); return;
    case DType::Float16: fn(__half{}); return;
    case DType::BFloat16: fn(__nv_bfloat16{}); return;
    default: return;  // callers check floating dtypes before launching
  }
}

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

template <int N>
bool is_contiguous(const StridedShape<N>& shape) {
  if (shape.ndim > 1) return false;
  for (int k = 0; k < N; ++k)
    if (shape.ndim == 1 && shape.strides[k][0] != 1) return false;
  return true;
}

// Launches kernel<Index>(calc, ...) with the narrowest index type that fits.
template <int N, typename Launch>
void with_offset_calculator(const StridedShape<N>& shape, int64_t numel, Launch&& launch) {
  if (offsets_fit_int32(shape, numel)) launch(make_offset_calculator<N, int32_t>(shape));
  else launch(make_offset_calculator<N, int64_t>(shape));
}

// ---- Kernels ----------------------------------------------------------------------------------

template <typename S, typename D>
__global__ void cast_contiguous_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = convert<D>(src[i]);
}

template <typename S, typename D, typename Index>
__global__ void copy_strided_kernel(const S* __restrict__ src, D* __restrict__ dst,
                                    OffsetCalculator<2, Index> calc, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    Index off[2];
    calc.offsets(static_cast<Index>(i), off);
    dst[off[0]] = convert<D>(src[off[1]]);
  }
}

template <typename D>
__global__ void fill_contiguous_kernel(D* __restrict__ dst, D value, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) dst[i] = value;
}

template <typename D, typename Index>
__global__ void fill_strided_kernel(D* __restrict__ dst, D value, OffsetCalculator<1, Index> calc, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    Index off[1];
    calc.offsets(static_cast<Index>(i), off);
    dst[off[0]] = value;
  }
}

// fma() pins the rounding: the CPU backend's `start + i * step` is contracted to an FMA by gcc.
template <typename D>
__global__ void arange_kernel(D* __restrict__ dst, int64_t n, double start, double step) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    dst[i] = convert<D>(fma(static_cast<double>(i), step, start));
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits, as the CPU backend.
__device__ __forceinline__ double uniform01(const uint32_t r[4], bool wide) {
  if (wide) return static_cast<double>((static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11)) * 0x1.0p-53;
  return static_cast<double>(r[0] >> 8) * 0x1.0p-24;
}

// Same counters and transforms as CpuBackend::random; the fma()s are the contractions gcc makes
// of the CPU's `a + (b - a) * u` and `a + b * s * c` (checked in its disassembly). Uniform and
// Bernoulli are bit-identical to the CPU; Normal can differ in the last bits of a double because
// CUDA's log/cos and glibc's may round differently (float results round to the same value).
template <typename D>
__global__ void random_kernel(D* __restrict__ dst, int64_t n, Distribution dist, double a, double b,
                              uint64_t seed, uint64_t offset, bool wide) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint32_t r[4];
    Philox4x32::generate(seed, offset + static_cast<uint64_t>(i), r);
    double v;
    switch (dist) {
      case Distribution::Uniform: v = fma(b - a, uniform01(r, wide), a); break;
      case Distribution::Normal: {  // Box–Muller on two independent words
        const double u1 = (static_cast<double>(r[2]) + 1.0) * 0x1.0p-32;  // (0, 1]
        const double u2 = static_cast<double>(r[3]) * 0x1.0p-32;
        v = fma(b * sqrt(-2.0 * log(u1)), cos(6.283185307179586 * u2), a);
        break;
      }
      default: v = uniform01(r, wide) < a ? 1.0 : 0.0; break;  // Bernoulli
    }
    dst[i] = convert<D>(v);
  }
}

template <typename D>
__global__ void scale_kernel(D* __restrict__ data, int64_t n, double factor) {
  for (int64_t i = first_index(); i < n; i += grid_stride())
    data[i] = convert<D>(factor * convert<double>(data[i]));
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

cudaError_t launch_copy(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                        const StridedShape<2>& shape, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const unsigned blocks = blocks_for(numel);
  dispatch_dtype(src_dtype, [&](auto s) {
    using S = decltype(s);
    dispatch_dtype(dst_dtype, [&](auto d) {
      using D = decltype(d);
      const S* sp = static_cast<const S*>(src);
      D* dp = static_cast<D*>(dst);
      if (is_contiguous(shape)) {
        cast_contiguous_kernel<S, D><<<blocks, kThreads, 0, stream>>>(sp, dp, numel);
        return;
      }
      with_offset_calculator(shape, numel, [&](auto calc) {
        copy_strided_kernel<<<blocks, kThreads, 0, stream>>>(sp, dp, calc, numel);
      });
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_fill(void* dst, DType dtype, double value, const StridedShape<1>& shape,
                        int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const bool contiguous = is_contiguous(shape);
  // Zero (not -0.0) is all-zero bits in every dtype: memset runs at copy-engine speed.
  if (contiguous && value == 0.0 && !std::signbit(value))
    return cudaMemsetAsync(dst, 0, static_cast<size_t>(numel) * element_size(dtype), stream);
  const unsigned blocks = blocks_for(numel);
  dispatch_dtype(dtype, [&](auto d) {
    using D = decltype(d);
    D* dp = static_cast<D*>(dst);
    const D v = convert<D>(value);
    if (contiguous) {
      fill_contiguous_kernel<D><<<blocks, kThreads, 0, stream>>>(dp, v, numel);
      return;
    }
    with_offset_calculator(shape, numel, [&](auto calc) {
      fill_strided_kernel<<<blocks, kThreads, 0, stream>>>(dp, v, calc, numel);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_arange(void* dst, DType dtype, int64_t numel, double start, double step,
                          cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_dtype(dtype, [&](auto d) {
    using D = decltype(d);
    arange_kernel<D><<<blocks_for(numel), kThreads, 0, stream>>>(static_cast<D*>(dst), numel, start, step);
  });
  return cudaGetLastError();
}

cudaError_t launch_random(void* dst, DType dtype, int64_t numel, Distribution dist, double a,
                          double b, uint64_t seed, uint64_t offset, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const bool wide = dtype == DType::Float64;
  dispatch_floating_dtype(dtype, [&](auto d) {
    using D = decltype(d);
    random_kernel<D><<<blocks_for(numel), kThreads, 0, stream>>>(static_cast<D*>(dst), numel, dist, a, b,
                                                                 seed, offset, wide);
  });
  return cudaGetLastError();
}

cudaError_t launch_scale(void* data, DType dtype, int64_t numel, double factor, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto d) {
    using D = decltype(d);
    scale_kernel<D><<<blocks_for(numel), kThreads, 0, stream>>>(static_cast<D*>(data), numel, factor);
  });
  return cudaGetLastError();
}

}  // namespace dp::cuda
