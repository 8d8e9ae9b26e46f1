// Batch norm at relu's kink: inputs whose pre-activations v = (x − mean)·scale + shift land within
// an ulp of zero, where a backward that recomputes relu's mask from x (BatchNormGradPrologue) must
// give exactly the mask of the forward's stored output. Used by the CPU and the CUDA tests of the
// fused batch_norm + relu.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp::testing {

struct BatchNormKinkCase {
  Tensor x;         // [N, C, *] in the case's dtype and memory format, values k/4 for k in [-8, 8]
  Tensor weight;    // [C] in the statistics dtype (float32 for half x)
  Tensor bias;      // [C], chosen so that x == kink[c] gives v = the rounding error of (x − mean)·scale
  Tensor upstream;  // like x: the gradient arriving at relu's output
  std::vector<double> kink;  // per channel, the x value at the kink
  int64_t at_kink = 0;       // elements with x == kink[c]
};

// Built on `device` from a fixed seed (`host`: the CPU, for the statistics' values). The bias is
// computed from the statistics the device's backend saves, in its statistics type, with the
// forward's own arithmetic (scale = invstd·w, product rounded once).
BatchNormKinkCase batch_norm_kink_case(Device device, Device host, DType dtype, MemoryFormat format,
                                       const Shape& shape, uint64_t seed, double eps);

// Trains one step of relu(batch_norm(x)) on the case — the fused op (batch_norm_add_relu without a
// residual) or the composition — and returns y, x's, weight's and bias's gradients as float64 on
// the host, in NCHW order.
std::vector<std::vector<double>> batch_norm_relu_step(const BatchNormKinkCase& c, Device host, bool fused,
                                                      double eps);

// Elements at the kink whose fused output y (batch_norm_relu_step's first result) is positive, and
// zero: the mask goes both ways there.
struct KinkOutcomes {
  int64_t positive = 0, zero = 0;
};
KinkOutcomes kink_outcomes(const BatchNormKinkCase& c, Device host, const std::vector<double>& y);

}  // namespace dp::testing
