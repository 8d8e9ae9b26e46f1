// Memory formats of 4-D activations: NCHW-contiguous and channels-last (NHWC), PyTorch's names.
//
// NOTE [ Channels-last ]
// A channels-last tensor keeps its logical shape [N, C, H, W] (so every op, name and checkpoint is
// the same) with strides (H·W·C, 1, W·C, C): the channels of a pixel are adjacent in memory. This
// is the layout tensor cores and oneDNN's direct convolutions work in; with NCHW they transpose
// around every convolution. `run.channels_last` converts a conv net's input once; from there
// every op keeps the format it was given:
//   - conv2d, batch_norm and the pools run their kernels in the input's format (suggest_memory_format)
//     and return it; their backward takes the gradient in that format;
//   - pointwise ops give a channels-last result when an operand of the result's shape is
//     channels-last, and their kernels see the operands permuted to [N, H, W, C];
//   - anything that needs NCHW order (flatten of a [N, C, H, W] map, a view across C) gets it from
//     contiguous(), a copy, exactly as in PyTorch.
// Weights keep PyTorch's layout [Cout, Cin/groups, KH, KW]; a backend that wants them otherwise
// (cuDNN's NHWC kernels) transposes them itself.
// Which format a tensor suggests: channels-last when it is 4-D, dense in NHWC order, and its
// strides are not exactly NCHW's. The two orders coincide in memory when C = 1 or H = W = 1
// ([N, 1, 28, 28] images, [N, C, 1, 1] pooled maps); the strides then carry the intent, as in
// PyTorch, so a channels-last Fashion-MNIST batch stays channels-last through the network.
// Kernels take every activation operand of one call in one format (common_memory_format).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "runtime/core/shape.h"

namespace dp {

class Tensor;

enum class MemoryFormat : uint8_t {
  Contiguous,    // row-major over the logical shape (NCHW for 4-D)
  ChannelsLast,  // 4-D only: NHWC in memory
};

const char* memory_format_name(MemoryFormat format);  // "contiguous", "channels_last"

// Strides of a dense tensor of `shape` in `format` (ChannelsLast needs 4 dims).
Shape strides_for(const Shape& shape, MemoryFormat format);

// Whether t is dense in `format`, ignoring the strides of size-1 dims (as is_contiguous()).
bool is_contiguous_in(const Tensor& t, MemoryFormat format);

// ChannelsLast when t is 4-D, dense in NHWC order and not strided exactly as NCHW; else
// Contiguous (NOTE [ Channels-last ]).
MemoryFormat suggest_memory_format(const Tensor& t);

// The one format that every tensor of a kernel call is dense in: Contiguous when all are
// NCHW-contiguous, else ChannelsLast when all are channels-last dense; anything else is an error
// naming `op` and the tensors (a kernel's contract takes one format per call).
MemoryFormat common_memory_format(const char* op, std::initializer_list<const Tensor*> tensors);

}  // namespace dp
