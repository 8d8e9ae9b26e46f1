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
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

void run_backward(const Tensor& root, const Tensor& grad_root);

}  // namespace dp
