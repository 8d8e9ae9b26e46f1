// 2-D convolution, NCHW, as torch.nn.functional.conv2d.
#pragma once

#include "runtime/backend/backend.h"
#include "runtime/tensor/tensor.h"

namespace dp {

// x [N, Cin, H, W], weight [Cout, Cin/groups, KH, KW], bias [Cout] (optional).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& params);

}  // namespace dp
