#include "runtime/autograd/node.h"

#include <atomic>

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/core/nvtx.h"

namespace dp {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
}  // namespace

Node::Node(std::string name)
    : name_(std::move(name)), module_(nvtx::current_module()), sequence_nr_(next_sequence_nr++) {}

std::vector<Tensor> FunctionNode::backward(const Tensor& grad_output) {
  DP_CHECK(fn_ != nullptr, "backward through '", name(),
           "' a second time: the graph is freed after backward (build it again with a new forward)");
  return fn_(grad_output, *this);
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf)
    : Node("AccumulateGrad"), leaf_(leaf) {}

namespace {

// NOTE [ Stealing the first gradient ]
// With set-to-none gradients the first contribution to a leaf would be copied into a fresh
// .grad: one more pass over every parameter's bytes per step, single-threaded (for ResNet-18
// 45 MB, ~2 % of a CPU step). As PyTorch's AccumulateGrad does, the incoming gradient becomes
// the .grad itself when nothing else can see it: this tensor is its storage's only user (the
// engine moved it here, no view or saved tensor shares it), it covers the whole storage, and
// it has the leaf's shape, dtype, device and a contiguous layout.
bool can_steal(const Tensor& incoming, const Tensor& leaf) {
  return is_sole_owner(incoming) && incoming.is_contiguous() && incoming.dtype() == leaf.dtype() &&
         incoming.device() == leaf.device() && !incoming.requires_grad();
}

Tensor fresh_copy(const Tensor& incoming, const Tensor& leaf) {
  Tensor g = Tensor::empty(leaf.shape(), leaf.dtype(), leaf.device());
  g.copy_(incoming);
  return g;
}

}  // namespace

bool is_sole_owner(const Tensor& t) {
  return t.defined() && t.impl_ptr().use_count() == 1 && t.storage().use_count() == 1 && t.offset() == 0 &&
         t.nbytes() == t.storage()->nbytes();
}

Tensor Node::pending_sum(size_t i, const Shape& shape, DType dtype, Device device, MemoryFormat format) const {
  if (i >= pending.size()) return Tensor();
  const Tensor& sum = pending[i];
  const bool fits = sum.defined() && sum.shape() == shape && sum.dtype() == dtype && sum.device() == device &&
                    sum.is_contiguous(format);
  return fits ? sum : Tensor();
}

Tensor Node::offered_home(size_t i, const Shape& shape, DType dtype, Device device) const {
  if (i >= offered.size()) return Tensor();
  const Tensor& home = offered[i];
  const bool fits = home.defined() && home.shape() == shape && home.dtype() == dtype && home.device() == device &&
                    home.is_contiguous();
  return fits ? home : Tensor();
}

Tensor Node::grad_buffer(size_t i, const Shape& shape, DType dtype, Device device) const {
  Tensor home = offered_home(i, shape, dtype, device);
  return home.defined() ? home : Tensor::empty(shape, dtype, device);
}

Tensor AccumulateGrad::first_gradient_home() const {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl || !impl->autograd || impl->autograd->grad || !impl->autograd->grad_home) return Tensor();
  return Tensor(impl->autograd->grad_home);
}

std::vector<Tensor> AccumulateGrad::backward(const Tensor& grad_output) {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl) return {};  // the parameter was destroyed; nothing to accumulate into
  Tensor leaf(impl);
  if (grad_output.defined()) {
    DP_CHECK(grad_output.shape() == leaf.shape(), "gradient of shape ", shape_str(grad_output.shape()),
             " for a leaf of shape ", shape_str(leaf.shape()));
    Tensor grad = leaf.grad();
    Tensor home = leaf.grad_home();
    if (!grad.defined() && home.defined()) {  // NOTE [ Gradient homes ]
      if (grad_output.impl_ptr() != home.impl_ptr()) {  // the op did not write it there
        home.copy_(grad_output);
        ++home_copies_;
      }
      home.bump_version();
      leaf.set_grad(home);
    } else if (!grad.defined()) {
      leaf.set_grad(can_steal(grad_output, leaf) ? grad_output.detach() : fresh_copy(grad_output, leaf));
    } else {
      Tensor src = grad_output.contiguous();
      if (src.dtype() != grad.dtype()) src = src.to(grad.dtype());
      DP_CHECK(grad.is_contiguous(), "accumulating into a non-contiguous .grad");
      grad.device().backend().axpby(1.0, src, 1.0, grad);
      grad.bump_version();
    }
  }
  for (auto& hook : impl->autograd->grad_ready_hooks) hook(leaf);
  return {};
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (t.defined()) {
    tensor_ = t.detach();
    version_ = t.version();
  }
}

Tensor SavedTensor::get(const char* op) const {
  if (tensor_.defined()) {
    DP_CHECK(tensor_.version() == version_, op,
             ": a tensor saved for backward was modified in place after it was saved "
             "(version ", version_, " → ", tensor_.version(), ")");
  }
  return tensor_;
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  AutogradMeta& meta = *t.impl().autograd;
  if (meta.grad_fn) return meta.grad_fn;
  if (!meta.accumulator) meta.accumulator = std::make_shared<AccumulateGrad>(t.impl_ptr());
  return meta.accumulator;
}

void record(const char* op, Tensor& output, const std::vector<Tensor>& inputs,
            FunctionNode::BackwardFn backward) {
  if (!any_requires_grad(inputs)) return;
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) node->next.push_back(gradient_edge(t));
  output.set_grad_fn(std::move(node));
}

}  // namespace dp
