// Pooling over NCHW, as torch.nn.functional.
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/tensor/tensor.h"

namespace dp {

Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace dp
