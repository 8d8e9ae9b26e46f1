// Autograd graph nodes.
//
// NOTE [ Autograd graph ]
// Every differentiable op that sees an input requiring grad (and GradMode enabled) creates one
// Node for its single output. node->next[i] is the node that receives the gradient of input i:
// the input's grad_fn, or the AccumulateGrad of a leaf, or null when input i needs no gradient
// (then backward need not compute it). Ops build nodes with record() below, writing the
// backward closure next to the forward code; the closure captures SavedTensors, which are
// released right after the node runs, so the graph's memory is freed during backward.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace dp {

class Node {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  const std::string& name() const { return name_; }
  // The module whose forward made this node (its dotted name), when an NVTX tool is attached;
  // null otherwise (NOTE [ NVTX ranges ] in core/nvtx.h).
  const std::shared_ptr<const std::string>& module() const { return module_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  // One gradient per input; entries for inputs with a null next[i] may be left undefined.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // Drops saved tensors; called by the engine once the node has run.
  virtual void release() {}
  bool needs_input_grad(size_t i) const { return i < next.size() && next[i] != nullptr; }
  // A fresh tensor for input i's gradient, or the buffer the engine offered for it: the leaf's
  // gradient home, when this node's gradient is the leaf's only one in this backward (NOTE
  // [ Gradient homes ] in autograd/engine.h). Ops that allocate a gradient of their own (a
  // weight's, a bias's) take it from here so that it can be written where it will live; an
  // offered buffer is used only when it has exactly this shape, dtype, device and is contiguous.
  Tensor grad_buffer(size_t i, const Shape& shape, DType dtype, Device device) const;
  // The buffer offered for input i when it has this shape, dtype and device, else undefined.
  Tensor offered_home(size_t i, const Shape& shape, DType dtype, Device device) const;
  // The gradient already waiting for input i (NOTE [ Summing into a pending gradient ] in
  // autograd/engine.h) when it has this shape, dtype, device and is contiguous in `format`, else
  // undefined. An op that takes it adds its gradient for input i into it, in place, and returns
  // this very tensor as input i's gradient; the engine then has nothing left to add.
  Tensor pending_sum(size_t i, const Shape& shape, DType dtype, Device device,
                     MemoryFormat format = MemoryFormat::Contiguous) const;
  // Set by the engine just before backward() (an undefined entry: nothing offered).
  std::vector<Tensor> offered;
  std::vector<Tensor> pending;

  std::vector<std::shared_ptr<Node>> next;

 private:
  std::string name_;
  std::shared_ptr<const std::string> module_;
  uint64_t sequence_nr_;  // creation order; the engine runs later-created nodes first
};

// A node whose backward is a closure written beside the op's forward.
class FunctionNode final : public Node {
 public:
  using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, const Node& self)>;
  FunctionNode(std::string name, BackwardFn fn) : Node(std::move(name)), fn_(std::move(fn)) {}
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  void release() override { fn_ = nullptr; }

 private:
  BackwardFn fn_;
};

// Sink for a leaf: accumulates into leaf.grad, then fires the leaf's grad-ready hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  // The leaf's gradient home when this backward would write .grad afresh (it is unset), else
  // undefined (NOTE [ Gradient homes ]).
  Tensor first_gradient_home() const;
  // Gradients this node copied into the leaf's home because the producing op had not written
  // them there (a test's view of whether the offer was taken).
  int64_t home_copies() const { return home_copies_; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
  int64_t home_copies_ = 0;
};

// A tensor kept for backward. It remembers the version counter so an in-place write between
// forward and backward is an error instead of a silently wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t);  // NOLINT: implicit by design
  Tensor get(const char* op) const;
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;  // detached: no reference back into the graph (no cycles)
  uint64_t version_ = 0;
};

// True when t is the only handle on its storage and covers all of it: nothing else can see a
// write into it (no other tensor, view or saved tensor shares the bytes).
bool is_sole_owner(const Tensor& t);

// True when GradMode is on and any of `inputs` requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `output` the result of a recorded op: wires next edges from `inputs` and sets grad_fn.
// Does nothing (and never calls backward) when no input requires grad or GradMode is off.
void record(const char* op, Tensor& output, const std::vector<Tensor>& inputs,
            FunctionNode::BackwardFn backward);

// The node that should receive gradients for `t` (its grad_fn or its leaf accumulator).
std::shared_ptr<Node> gradient_edge(const Tensor& t);

}  // namespace dp
