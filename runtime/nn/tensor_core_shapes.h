// Which layers' matrix dimensions keep them off tensor cores' fast paths.
//
// NOTE [ Tensor-core shapes ]
// cuBLASLt and cuDNN run float16/bfloat16 (and TF32) GEMMs and convolutions on tensor cores at
// full speed when the GEMM dimensions are multiples of 8 elements (16 bytes); otherwise they pad
// internally or fall back to slower kernels (NVIDIA's "Matrix Multiplication Background" and
// "Convolutional Layers" performance guides). A layer's dimensions are the model's choice, so the
// trainer names the layers that miss, once, at the start of a GPU run in mixed precision or TF32,
// and leaves the model as the user built it: padding a layer changes its parameters' shapes, and
// with them the checkpoint and the PyTorch names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/nn/module.h"

namespace dp::nn {

struct ShapeAdvice {
  std::string layer;      // "fc2", as named_modules() names it
  std::string dimension;  // "out_features"
  int64_t size = 0;       // 10
};

// Every Linear (in/out features), Conv2d (input channels per group, output channels) and
// Embedding (embedding dim) dimension of `model` that is not a multiple of `multiple`.
std::vector<ShapeAdvice> tensor_core_shape_advice(Module& model, int64_t multiple = 8);

// "conv1 in_channels 1, fc2 out_features 10" (at most `limit` entries, then "and N more").
std::string describe(const std::vector<ShapeAdvice>& advice, size_t limit = 6);

}  // namespace dp::nn
