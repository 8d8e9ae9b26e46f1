// Types shared by the CUDA kernels (.cu, compiled as C++17 by nvcc) and their host front-ends
// (.cpp, C++20): no tensor types and no C++20 here. Each family's launchers are declared in
// <family>_kernels.h and take raw pointers, sizes and the stream; they queue the kernel and
// return the launch status, which the front-end checks with DP_CUDA_CHECK.
#pragma once

#include <cstdint>

namespace dp::cuda {

inline constexpr int kMaxDims = 8;

// Shape and per-operand strides (in elements) of a strided loop, innermost dim first, after
// merging dims that are contiguous in every operand (make_strided_shape, strided_shape.h).
// Passed to kernels by value.
template <int N>
struct StridedShape {
  int32_t ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[N][kMaxDims] = {};
};

// NOTE [ Device errors ]
// Some errors are in data only a kernel sees: a class index outside [0, C), an embedding index
// outside [0, V). The CPU backend throws at once; a CUDA kernel cannot, and a check on the host
// would synchronise every step. So the kernel records the first such error in a DeviceErrors
// block the backend owns (mapped pinned host memory: written by the GPU, read by the host with
// no copy), and the backend throws it as a dp::Error at its next synchronize() or
// copy_to_host(), which every training loop reaches when it reads a loss to print. Later errors
// are dropped until that one is reported. record_device_error() in device_utils.cuh writes it.
enum class DeviceErrorCode : int32_t {
  None = 0,
  ClassIndexOutOfRange = 1,      // cross_entropy: target not in [0, C) and not ignore_index
  EmbeddingIndexOutOfRange = 2,  // embedding: index not in [0, V)
};

struct DeviceErrors {
  int32_t code = 0;   // a DeviceErrorCode; 0 while nothing has been recorded
  int32_t claimed = 0;  // set by the one thread that writes the record (atomicCAS)
  int64_t value = 0;  // the offending value
  int64_t bound = 0;  // the bound it broke (C or V)
  int64_t where = 0;  // the element (row) it was found at
};

}  // namespace dp::cuda
