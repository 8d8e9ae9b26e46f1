// The backward engine.
//
// NOTE [ Gradient-ready hooks ]
// run_backward() executes the graph in dependency order, and among ready nodes the most
// recently created first (as PyTorch), so gradients of late layers are final early. A leaf's
// AccumulateGrad runs only after every path into it has delivered its contribution; it then adds
// the sum into leaf.grad and fires the leaf's grad-ready hooks: exactly once per backward per
// parameter reached, at the moment its gradient is final. The DDP reducer launches bucket
// all-reduces from these hooks while the rest of backward continues.
//
// NOTE [ Gradient homes ]
// A leaf may name a gradient home (Tensor::set_grad_home): the DDP reducer names each
// parameter's view in its gradient bucket. With .grad unset (zero_grad(set_to_none)) the first
// accumulation of a backward then writes the gradient there instead of into a fresh tensor that
// the reducer would copy into the bucket: the engine offers the home to the node whose gradient
// is the leaf's only one (Node::grad_buffer), an op that allocates its own input gradient (a
// convolution's or linear layer's weight and bias, batch and layer norm's affine parameters, an
// embedding table, a dtype cast) computes it straight into the home, and AccumulateGrad, seeing
// its home arrive, only sets .grad to it. Otherwise (the op made the gradient some other way,
// several nodes contribute to the leaf) AccumulateGrad copies the sum into the home once. Either
// way .grad is the bucket view, and no gradient of the step is allocated and copied again. With
// .grad already set (accumulation micro-steps) gradients add into it as before.
//
// NOTE [ Summing into a pending gradient ]
// A tensor used twice gets two gradients, and the engine adds them: a kernel that reads both and
// writes a third tensor. In a residual network every block's input has two (the residual's and
// the first convolution's), in a Transformer layer every hidden state four (the residual's and
// the query, key and value projections'): in ResNet-50 at batch 128 ~0.72 G activations a step
// go through such an add, three passes each. When the first gradient is waiting in the engine
// and nothing else can see it (is_sole_owner), the engine offers it to the node that makes the
// next one (Node::pending_sum); a convolution or linear layer then computes its input gradient
// straight into it with beta = 1 (cuDNN's and GEMM's blending, in the accumulation precision),
// returns it, and the add — and the fresh tensor it fills — are gone. Values are the same sum
// up to rounding: a low-precision gradient is rounded once instead of twice, and a GEMM may add
// the pending value before its last partial products. BackwardStats counts both kinds of sums.
#pragma once

#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace dp {

struct BackwardOptions {
  bool sum_in_place = true;  // offer pending gradients (NOTE [ Summing into a pending gradient ])
};

// What one backward did with gradients that met at a node.
struct BackwardStats {
  int64_t sums = 0;           // added by the engine: a fresh tensor and a kernel each
  int64_t sums_in_place = 0;  // added by the op that made the second one, into the first
};

BackwardStats run_backward(const Tensor& root, const Tensor& grad_root, const BackwardOptions& options = {});

}  // namespace dp
