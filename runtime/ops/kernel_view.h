// How the pointwise kernels see a tensor of a memory format (NOTE [ Channels-last ]).
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

// t as the kernels see it for `format`: itself, or permuted to [N, H, W, C] (detached), which is
// contiguous for a channels-last dense t.
inline Tensor kernel_view(const Tensor& t, MemoryFormat format) {
  return format == MemoryFormat::ChannelsLast ? t.detach().permute({0, 2, 3, 1}) : t.detach();
}

}  // namespace dp
