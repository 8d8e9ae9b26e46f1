// The backward engine.
//
// NOTE [ Gradient-ready hooks ]
// run_backward() executes the graph in dependency order, and among ready nodes the most
// recently created first (as PyTorch), so gradients of late layers are final early. A leaf's
// AccumulateGrad runs only after every path into it has delivered its contribution; it then adds
// the sum into leaf.grad and fires the leaf's grad-ready hooks: exactly once per backward per
// parameter reached, at the moment its gradient is final. The DDP reducer launches bucket
// all-reduces from these hooks while the rest of backward continues.
#pragma once

#include "runtime/tensor/tensor.h"

namespace dp {

void run_backward(const Tensor& root, const Tensor& grad_root);

}  // namespace dp
