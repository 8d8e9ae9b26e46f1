// Gradient norms and clipping by global norm (torch.nn.utils.clip_grad_norm_ semantics).
#pragma once

#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp {

// Σ x² of each tensor, accumulated in float64, from one Backend::squared_norms call (tensors
// made contiguous; all on one device; float32 or float64).
std::vector<double> squared_norms(const std::vector<Tensor>& xs);

// The L2 norm of all of `xs` taken together: √(Σ squared_norms(xs)).
double global_norm(const std::vector<Tensor>& xs);

// The L2 norm of all gradients of `params` taken together (parameters without one skipped).
double grad_norm(const std::vector<Tensor>& params);

// Scales every gradient in place by min(1, max_norm / (N + 1e-6)), N = grad_norm(params), and
// returns N, as torch.nn.utils.clip_grad_norm_. A non-finite N leaves the gradients untouched
// and is returned as is (the caller decides: the trainer skips such a step).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// clip_grad_norm_ with no host read (NOTE [ Device-resident optimiser step ], optim/optimizer.h):
// the norm and coefficient are computed and applied on the gradients' device; a non-finite norm
// sets found_inf (float32 [] on that device, never cleared here) and leaves the gradients as they
// are, so the step that reads found_inf is skipped. Gradients are scaled by exactly the factor
// clip_grad_norm_ uses. Returns the norm, float64 [] on the device (read it for logs only).
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, const Tensor& found_inf);

}  // namespace dp
