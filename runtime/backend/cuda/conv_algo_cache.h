// cuDNN convolution algorithm choices by problem, so the search (timing every algorithm with
// cudnnFind*Ex, or asking the heuristic with cudnnGet*_v7) runs once per problem rather than once
// per call. Internal to the CUDA backend (conv.cpp fills it; cuda_backend.cpp only owns it).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"

namespace dp::cuda {

// Which convolution pass a choice is for.
enum class ConvPass : uint8_t { Forward, BackwardData, BackwardFilter };

// Memory layout of activations and weight: NCHW (contiguous today), or NHWC (PyTorch's
// channels_last: the same logical [N, C, H, W] with channel stride 1; the weight
// [Cout, Cin/g, KH, KW] likewise). conv.cpp builds every cuDNN descriptor from it.
enum class ConvLayout : uint8_t { NCHW, NHWC };

// pass, dtype, TF32 allowed, layout, benchmark, N, C, H, W, K, KH, KW, stride h/w, padding h/w,
// dilation h/w, groups, the buffers' common alignment (≤ 16 bytes): everything the search depends
// on (conv.cpp builds it).
using ConvProblemKey = std::array<int64_t, 20>;

struct ConvAlgoChoice {
  int algo = 0;                // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  int math_type = 0;           // cudnnMathType_t the algorithm was chosen with (set before each run)
  size_t workspace_bytes = 0;  // what it needs, allocated from the stream-ordered pool per call
};

// Two cudnnFind*AlgorithmEx runs' results merged (NOTE [ cuDNN convolution algorithms ] in
// conv.cpp): each (algo, mathType) result of `first` keeps the better of its two timings — a
// time from a run where it succeeded (ok(r)) and was timed (time >= 0) — sorted fastest first,
// results with no usable time after all others in first's order. Perf is one of cuDNN's
// *AlgoPerf_t (fields algo, mathType, time); results only in `second` are left out.
template <typename Perf, typename Ok>
std::vector<Perf> merge_find_runs(const std::vector<Perf>& first, const std::vector<Perf>& second, Ok ok) {
  std::vector<Perf> merged = first;
  for (Perf& r : merged) {
    for (const Perf& s : second) {
      if (s.algo != r.algo || s.mathType != r.mathType || !ok(s) || s.time < 0) continue;
      if (!ok(r) || r.time < 0 || s.time < r.time) r = s;
    }
  }
  auto usable = [&](const Perf& r) { return ok(r) && r.time >= 0; };
  std::stable_sort(merged.begin(), merged.end(), [&](const Perf& a, const Perf& b) {
    if (usable(a) != usable(b)) return usable(a);
    return usable(a) && a.time < b.time;
  });
  return merged;
}

struct CudaBackend::ConvAlgoCache {
  std::mutex mutex;
  std::map<ConvProblemKey, ConvAlgoChoice> choices;
};

}  // namespace dp::cuda
