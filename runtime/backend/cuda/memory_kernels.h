// Launchers for the CUDA kernels in memory.cu: copies/casts, fills, arange, random numbers and
// an in-place scale (conventions in kernel_types.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// Mirrors dp::RandomDist (backend.h is C++20 and stays out of the .cu).
enum class Distribution : uint8_t { Uniform, Normal, Bernoulli };

// dst = cast(src) elementwise over `numel` elements; shape.strides[0] is dst's, [1] is src's.
cudaError_t launch_copy(const void* src, DType src_dtype, void* dst, DType dst_dtype,
                        const StridedShape<2>& shape, int64_t numel, cudaStream_t stream);
// dst = value (cast to dst's dtype as the CPU backend does).
cudaError_t launch_fill(void* dst, DType dtype, double value, const StridedShape<1>& shape,
                        int64_t numel, cudaStream_t stream);
// Contiguous dst[i] = start + i * step.
cudaError_t launch_arange(void* dst, DType dtype, int64_t numel, double start, double step,
                          cudaStream_t stream);
// Contiguous floating dst; element i from Philox-4x32-10 counter (offset + i), plus
// *offset_base when it is not null (read by the kernel), with the CPU backend's transforms
// (runtime/backend/cpu/memory.cpp), so both give the same numbers.
cudaError_t launch_random(void* dst, DType dtype, int64_t numel, Distribution dist, double a,
                          double b, uint64_t seed, uint64_t offset, const int64_t* offset_base,
                          cudaStream_t stream);
// Contiguous floating data *= factor.
cudaError_t launch_scale(void* data, DType dtype, int64_t numel, double factor,
                         cudaStream_t stream);

}  // namespace dp::cuda
