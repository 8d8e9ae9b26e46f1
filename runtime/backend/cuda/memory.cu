// CUDA kernels for copies/casts, fills, arange, random numbers and scaling (the CPU's
// cpu/memory.cpp); launchers after the kernels. Every kernel is a grid-stride loop over a flat
// element index.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/memory_kernels.h"
#include "runtime/tensor/philox.h"

namespace dp::cuda {
namespace {

using namespace device;

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
// offset_base (may be null): a device counter added to offset when the kernel runs (NOTE [ Random
// numbers in CUDA graphs ]).
template <typename D>
__global__ void random_kernel(D* __restrict__ dst, int64_t n, Distribution dist, double a, double b,
                              uint64_t seed, uint64_t offset, const int64_t* __restrict__ offset_base, bool wide) {
  const uint64_t first = offset + (offset_base != nullptr ? static_cast<uint64_t>(*offset_base) : 0);
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    uint32_t r[4];
    Philox4x32::generate(seed, first + static_cast<uint64_t>(i), r);
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
                          double b, uint64_t seed, uint64_t offset, const int64_t* offset_base,
                          cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  const bool wide = dtype == DType::Float64;
  dispatch_floating_dtype(dtype, [&](auto d) {
    using D = decltype(d);
    random_kernel<D><<<blocks_for(numel), kThreads, 0, stream>>>(static_cast<D*>(dst), numel, dist, a, b,
                                                                 seed, offset, offset_base, wide);
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
