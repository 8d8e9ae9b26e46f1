// CudaBackend::GraphMemory (NOTE [ Graph memory ] in cuda_backend.h), shared by the backend's
// lifetime code and graph.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "runtime/backend/block_arena.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"

namespace dp::cuda {

// The captures' pool, and the ordinary blocks freed while a capture was recording: the graph may
// read them at every replay, so they go back to the stream-ordered pool only once no graph is left.
struct CudaBackend::GraphMemory {
  explicit GraphMemory(int device)
      : arena([device](size_t nbytes) {
          // cudaMalloc is "potentially unsafe" while this thread captures: allowed for the call
          // (it adds no work to the stream; the graph keeps the address), as PyTorch's allocator does.
          cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
          DP_CUDA_CHECK(device, cudaThreadExchangeStreamCaptureMode(&mode));
          void* ptr = nullptr;
          const cudaError_t status = cudaMalloc(&ptr, nbytes);
          DP_CUDA_CHECK(device, cudaThreadExchangeStreamCaptureMode(&mode));
          if (status != cudaSuccess)
            throw_cuda_error("cudaMalloc(&ptr, nbytes)", status, device,
                             detail::concat("a segment of ", format_bytes(nbytes), " for a CUDA graph's memory pool"));
          return ptr;
        }) {}

  BlockArena arena;
  std::vector<void*> kept;  // ordinary pool blocks freed during a capture
};

}  // namespace dp::cuda
