// Pooling window arithmetic shared by the CPU's NCHW (pool.cpp) and channels-last
// (pool_channels_last.cpp) kernels, so both formats divide and bound windows identically.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/backend/backend.h"

namespace dp::cpu {

// Window [start, end) of output index o for adaptive pooling (PyTorch's bounds).
inline int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
inline int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

// Divisor of an average-pool window starting at (h0, w0), as PyTorch computes it (ceil_mode off).
inline int64_t avg_divisor(int64_t h0, int64_t w0, const Pool2dParams& p, int64_t H, int64_t W) {
  if (p.count_include_pad) {
    const int64_t h1 = std::min(h0 + p.kernel_h, H + p.pad_h), w1 = std::min(w0 + p.kernel_w, W + p.pad_w);
    return (h1 - h0) * (w1 - w0);
  }
  const int64_t hs = std::max<int64_t>(h0, 0), ws = std::max<int64_t>(w0, 0);
  const int64_t he = std::min(h0 + p.kernel_h, H), we = std::min(w0 + p.kernel_w, W);
  return std::max<int64_t>((he - hs) * (we - ws), 1);
}

}  // namespace dp::cpu
