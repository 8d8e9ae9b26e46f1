// cuBLASLt algorithm choices by GEMM problem, so the heuristic query (tens of µs) runs once per
// problem rather than once per call. Internal to the CUDA backend (gemm.cpp fills it).
#pragma once

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

#include "runtime/backend/cuda/cuda_backend.h"

namespace dp::cuda {

// dtype, TF32, both transposes, m, n, k, the three leading dims, batch count, the three batch
// strides and the three pointers' alignments: everything the heuristic looks at.
using GemmProblemKey = std::array<int64_t, 17>;

struct CudaBackend::GemmAlgoCache {
  std::mutex mutex;
  // std::nullopt: cuBLASLt offers no algorithm for the problem; gemm.cpp then uses cuBLAS.
  std::map<GemmProblemKey, std::optional<cublasLtMatmulAlgo_t>> algos;
};

}  // namespace dp::cuda
