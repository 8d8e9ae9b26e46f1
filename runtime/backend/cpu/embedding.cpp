// Embedding gather (forward) and scatter-add (backward).
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

namespace dp {

using namespace cpu;

namespace {

// Rejects an index outside [0, V). A serial scan before any parallel loop: an exception cannot
// leave an OpenMP region.
void check_indices(const int64_t* idx, int64_t K, int64_t V) {
  for (int64_t k = 0; k < K; ++k)
    DP_CHECK(idx[k] >= 0 && idx[k] < V, "embedding: index ", idx[k], " (position ", k,
             ") is out of range for a weight of ", V, " rows; expected [0, ", V, ")");
}

}  // namespace

// weight [V, D] contiguous; indices int64 [K] contiguous; out [K, D] contiguous.
void CpuBackend::embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out) {
  DP_ASSERT(weight.is_contiguous() && indices.is_contiguous() && out.is_contiguous() && weight.dim() == 2 &&
            indices.dtype() == kInt64);
  const int64_t V = weight.size(0), D = weight.size(1), K = indices.numel();
  const int64_t* idx = indices.data<int64_t>();
  check_indices(idx, K, V);
  const size_t row_bytes = static_cast<size_t>(D) * weight.element_size();
  const auto* w = static_cast<const std::byte*>(weight.raw_data());
  auto* o = static_cast<std::byte*>(out.raw_data());
  const int threads = K * D >= kParallelGrain ? num_threads_ : 1;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t k = 0; k < K; ++k) std::memcpy(o + k * row_bytes, w + idx[k] * row_bytes, row_bytes);
}

// dout [K, D], dweight [V, D] contiguous (zeroed by the caller); indices int64 [K].
// Race-free without atomics: each thread owns a range of vocabulary rows and adds only the
// dout rows whose index falls in it, in order of k, so the result does not depend on the
// thread count.
void CpuBackend::embedding_backward(const Tensor& dout, const Tensor& indices, const Tensor& dweight,
                                    int64_t padding_idx) {
  DP_ASSERT(dout.is_contiguous() && indices.is_contiguous() && dweight.is_contiguous() &&
            dweight.dim() == 2 && indices.dtype() == kInt64);
  const int64_t V = dweight.size(0), D = dweight.size(1), K = indices.numel();
  const int64_t* idx = indices.data<int64_t>();
  check_indices(idx, K, V);
  const int threads =
      K * D >= kParallelGrain ? static_cast<int>(std::clamp<int64_t>(V, 1, num_threads_)) : 1;
  dispatch_floating(dweight.dtype(), "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    T* dw = dweight.data<T>();
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t v0 = V * t / nt, v1 = V * (t + 1) / nt;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t v = idx[k];
        if (v < v0 || v >= v1 || v == padding_idx) continue;
        const T* src = g + k * D;
        T* dst = dw + v * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
      }
    }
  });
}

}  // namespace dp
