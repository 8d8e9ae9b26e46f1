#include "runtime/tensor/tensor.h"

#include <cstring>
#include <sstream>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/core/host_sync.h"

namespace dp {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, device, MemoryFormat::Contiguous);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  for (int64_t s : shape) DP_CHECK(s >= 0, "cannot create a tensor of shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device, static_cast<size_t>(numel_of(shape)) * dp::element_size(dtype));
  impl->sizes = shape;
  impl->strides = strides_for(shape, format);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place (as PyTorch)
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

std::string Tensor::str() const {
  if (!defined()) return "(undefined tensor)";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

void* Tensor::raw_data() const {
  char* base = static_cast<char*>(impl().storage->data());
  return base ? base + offset() * static_cast<int64_t>(element_size()) : nullptr;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous) return contiguous();
  DP_CHECK(dim() == 4, "contiguous(channels_last): expected a 4-D tensor [N, C, H, W], got ", str());
  if (suggest_memory_format() == format) return *this;
  if (is_contiguous(format)) return view_like(shape(), strides_for(shape(), format));  // same memory
  Tensor out = Tensor::empty(shape(), dtype(), device(), format);
  device().backend().copy(*this, out);
  if (any_requires_grad({this}))
    record("contiguous", out, {*this}, [](const Tensor& g, const Node&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor Tensor::detached_as_strided(const Shape& sizes, const Shape& strides) const {
  DP_CHECK(sizes.size() == strides.size(), "detached_as_strided: ", sizes.size(), " sizes and ", strides.size(),
           " strides");
  return detach().make_view(sizes, strides, offset());
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  device().backend().copy(*this, out);
  if (any_requires_grad({this})) {
    record("clone", out, {*this}, [](const Tensor& g, const Node&) { return std::vector<Tensor>{g}; });
  }
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  return to(target, suggest_memory_format());  // preserves the format
}

Tensor Tensor::to(DType target, MemoryFormat format) const {
  if (target == dtype()) return contiguous(format);
  Tensor out = Tensor::empty(shape(), target, device(), format);
  device().backend().copy(*this, out);
  if (any_requires_grad({this}) && is_floating(target)) {
    const DType source = dtype();
    const MemoryFormat source_format = suggest_memory_format();
    record("to_dtype", out, {*this}, [source, source_format](const Tensor& g, const Node& node) {
      // An autocast weight's gradient widened straight into its home (NOTE [ Gradient homes ]),
      // else into a tensor of the source's format (a channels-last cast of a contiguous weight
      // gives the weight a contiguous gradient).
      Tensor grad = node.offered_home(0, g.shape(), source, g.device());
      if (!grad.defined()) grad = Tensor::empty(g.shape(), source, g.device(), source_format);
      g.device().backend().copy(g, grad);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  // PyTorch's preserve_format: a channels-last tensor arrives channels-last (its elements are dense
  // in that order and travel as they are); anything else arrives contiguous.
  const MemoryFormat format =
      !is_contiguous() && is_contiguous(MemoryFormat::ChannelsLast) ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  Tensor src = format == MemoryFormat::ChannelsLast ? *this : contiguous();
  Tensor out = Tensor::empty(shape(), dtype(), target, format);
  if (src.device().is_cpu()) {
    target.backend().copy_from_host(out.raw_data(), src.raw_data(), src.nbytes());
  } else if (target.is_cpu()) {
    check_host_sync_allowed("Tensor::to(cpu)");
    src.device().backend().copy_to_host(out.raw_data(), src.raw_data(), src.nbytes());
  } else {
    DP_CHECK(false, "copy between two GPUs (", src.device().str(), " → ", target.str(),
             ") is not supported yet; copy through the CPU");
  }
  if (any_requires_grad({this})) {
    Device source = device();
    record("to_device", out, {*this}, [source](const Tensor& g, const Node&) {
      return std::vector<Tensor>{g.to(source)};
    });
  }
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->sizes = impl_->sizes;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  impl->version = impl_->version;
  return Tensor(std::move(impl));
}

namespace {
// In-place writes are not recorded by autograd; refuse them where they would corrupt a graph.
void check_inplace_allowed(const Tensor& t, const char* op) {
  DP_CHECK(!(GradMode::enabled() && t.requires_grad()), op,
           ": in-place write to a tensor that requires grad (", t.str(),
           "); do it under NoGradGuard or on a detached tensor");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_allowed(*this, "copy_");
  Tensor s = src;
  if (s.device() != device()) s = s.detach().to(device());
  if (s.shape() != shape()) {
    DP_CHECK(broadcast_shapes(s.shape(), shape(), "copy_") == shape(), "copy_: cannot copy ",
             s.str(), " into ", str());
    s = s.detach().expand(shape());
  }
  device().backend().copy(s, *this);
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace_allowed(*this, "fill_");
  device().backend().fill(*this, value);
  bump_version();
  return *this;
}

template <typename T>
T Tensor::item() const {
  DP_CHECK(numel() == 1, "item(): expected a one-element tensor, got ", str());
  return to_vector<T>()[0];
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  constexpr DType want = std::is_same_v<T, float>     ? kFloat32
                         : std::is_same_v<T, double>  ? kFloat64
                         : std::is_same_v<T, int32_t> ? kInt32
                         : std::is_same_v<T, int64_t> ? kInt64
                         : std::is_same_v<T, uint8_t> ? kUInt8
                                                      : kBool;
  check_host_sync_allowed(numel() == 1 ? "Tensor::item" : "Tensor::to_vector");
  Tensor src = detach();
  if (src.dtype() != want) src = src.to(want);
  src = src.contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(out.size());
    src.device().backend().copy_to_host(bytes.data(), src.raw_data(), src.nbytes());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bytes[i] != 0;
  } else {
    src.device().backend().copy_to_host(out.data(), src.raw_data(), src.nbytes());
  }
  return out;
}

#define DP_INSTANTIATE(T) template T Tensor::item<T>() const; \
  template std::vector<T> Tensor::to_vector<T>() const;
DP_INSTANTIATE(float)
DP_INSTANTIATE(double)
DP_INSTANTIATE(int32_t)
DP_INSTANTIATE(int64_t)
DP_INSTANTIATE(uint8_t)
DP_INSTANTIATE(bool)
#undef DP_INSTANTIATE

// ---- Autograd accessors ----

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  DP_CHECK(!requires_grad || is_floating(dtype()), "requires_grad needs a floating tensor, got ", str());
  DP_CHECK(is_leaf(), "set_requires_grad on a non-leaf tensor (it already has a grad_fn); use detach()");
  if (!impl().autograd) impl().autograd = std::make_unique<AutogradMeta>();
  impl().autograd->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  if (!impl().autograd || !impl().autograd->grad) return Tensor();
  return Tensor(impl().autograd->grad);
}

void Tensor::set_grad(const Tensor& grad) {
  if (!impl().autograd) impl().autograd = std::make_unique<AutogradMeta>();
  if (grad.defined()) {
    DP_CHECK(grad.shape() == shape() && grad.device() == device(), "set_grad: gradient ", grad.str(),
             " does not match tensor ", str());
  }
  impl().autograd->grad = grad.impl_ptr();
}

const std::shared_ptr<Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<Node> none;
  return impl().autograd ? impl().autograd->grad_fn : none;
}

void Tensor::set_grad_fn(std::shared_ptr<Node> fn) {
  if (!impl().autograd) impl().autograd = std::make_unique<AutogradMeta>();
  impl().autograd->grad_fn = std::move(fn);
  impl().autograd->requires_grad = impl().autograd->grad_fn != nullptr;
}

void Tensor::set_grad_home(const Tensor& home) {
  if (!impl().autograd) impl().autograd = std::make_unique<AutogradMeta>();
  if (home.defined()) {
    DP_CHECK(is_leaf() && home.shape() == shape() && home.dtype() == dtype() && home.device() == device() &&
                 home.is_contiguous(),
             "set_grad_home: the home of a leaf's gradient must be contiguous with its shape, dtype and device, got ",
             home.str(), " for ", str());
  }
  impl().autograd->grad_home = home.defined() ? home.impl_ptr() : nullptr;
}

Tensor Tensor::grad_home() const {
  if (!impl().autograd || !impl().autograd->grad_home) return Tensor();
  return Tensor(impl().autograd->grad_home);
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) {
  DP_CHECK(requires_grad() && is_leaf(), "grad-ready hooks are for leaves that require grad, got ", str());
  impl().autograd->grad_ready_hooks.push_back(std::move(hook));
}

void Tensor::backward(const Tensor& grad) const {
  Tensor g = grad;
  if (!g.defined()) {
    DP_CHECK(numel() == 1, "backward() without a gradient needs a one-element tensor, got ", str(),
             "; pass the gradient of the output");
    g = Tensor::empty(shape(), dtype(), device());
    g.device().backend().fill(g, 1.0);
  }
  DP_CHECK(g.shape() == shape(), "backward: gradient ", g.str(), " does not match output ", str());
  run_backward(*this, g);
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  DP_CHECK(a.device() == b.device(), op, ": tensors on different devices (", a.device().str(),
           " and ", b.device().str(), ")");
}

void check_floating(const char* op, const Tensor& t) {
  DP_CHECK(is_floating(t.dtype()), op, ": expected a floating tensor, got ", t.str());
}

}  // namespace dp
