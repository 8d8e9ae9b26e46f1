// Pooling over NCHW, as torch.nn.functional (ceil_mode off, dilation 1).
#pragma once

#include <utility>

#include "runtime/backend/backend.h"
#include "runtime/tensor/tensor.h"

namespace dp {

// x [N, C, H, W] → [N, C, OH, OW], OH = (H + 2·pad_h − kernel_h) / stride_h + 1 (likewise OW).
// Padding is at most half the kernel, as in PyTorch.
Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
// Also returns the int32 indices [N, C, OH, OW] of each maximum: h * W + w within its (n, c)
// input plane (PyTorch's convention, which stores them as int64).
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& params);
// Divides by the full window (count_include_pad) or by its part inside the image.
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
// x [N, C, H, W] → [N, C, out_h, out_w]; window i spans [floor(i·H/out_h), ceil((i+1)·H/out_h)).
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace dp
