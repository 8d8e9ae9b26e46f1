// Batch norm's backward with relu's mask read from the forward's output and folded into the sums
// pass (BatchNormGradPrologue::relu_output, bn → add → relu): against relu's own backward followed
// by the plain batch-norm backward on the same backend, bit for bit — the masked gradient it writes
// and dx, dweight, dbias. Used by the CPU and the CUDA tests.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp::testing {

// Runs the cases (float32, float64, bfloat16, float16; NCHW and channels-last; vector and scalar
// widths; shapes whose sums take several row walks) on `device`; `host` is the CPU.
void expect_relu_mask_fold_matches_two_passes(Device device, Device host);

// The fold's refusals: eval, with the relu prologue, with no sums to take, laid out unlike dy.
void expect_relu_mask_fold_refusals(Device device);

}  // namespace dp::testing
