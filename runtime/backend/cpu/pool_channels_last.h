// Pooling kernels for channels-last tensors (NOTE [ Channels-last ]), behind CpuBackend's pooling
// entry points (pool.cpp), which call them when their operands are channels-last.
//
// A pixel's C channels are adjacent, so every kernel walks output pixels and runs one vector loop
// across the channels for each window tap. Each element sees the same operations in the same order
// as in pool.cpp's NCHW kernels (window scanned row by row; backward scatters in output order,
// float16/bfloat16 accumulated in float32 and rounded once), so both formats give identical bits.
#pragma once

#include "runtime/backend/backend.h"

namespace dp::cpu {

// x [N, C, H, W] → y, indices [N, C, OH, OW], all channels-last; indices h·W + w in the plane.
void max_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p,
                                      int threads);
void max_pool2d_backward_channels_last(const Tensor& dy, const Tensor& indices, const Tensor& dx, int threads);
void avg_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, const Pool2dParams& p, int threads);
void avg_pool2d_backward_channels_last(const Tensor& dy, const Tensor& dx, const Pool2dParams& p, int threads);
void adaptive_avg_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, int threads);
void adaptive_avg_pool2d_backward_channels_last(const Tensor& dy, const Tensor& dx, int threads);

}  // namespace dp::cpu
