// Tensor = storage + shape + strides + offset + dtype (+ autograd metadata).
//
// A Tensor is a cheap shared handle (like torch::Tensor): copies alias the same TensorImpl.
// Views (view, reshape, transpose, permute, narrow, expand, ...) share the storage and are
// differentiable. Ops live in runtime/ops/; this header keeps the data model and views.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/shape.h"
#include "runtime/tensor/memory_format.h"
#include "runtime/tensor/storage.h"

namespace dp {

class Node;
class AccumulateGrad;
class Tensor;
struct TensorImpl;

// Called with the parameter once its gradient is final for this backward (see autograd/engine.h).
using GradReadyHook = std::function<void(Tensor&)>;

struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;            // accumulated gradient of a leaf (may be null)
  std::shared_ptr<Node> grad_fn;               // producer of a non-leaf
  std::shared_ptr<AccumulateGrad> accumulator; // created lazily for leaves that require grad
  std::vector<GradReadyHook> grad_ready_hooks; // leaves only
  // Where a backward's first accumulation writes this leaf's gradient when .grad is unset (its
  // view in a DDP gradient bucket; NOTE [ Gradient homes ] in autograd/engine.h). Leaves only.
  std::shared_ptr<TensorImpl> grad_home;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  // Bumped by every in-place write; saved tensors remember it to catch stale use in backward.
  // Atomic: a loader thread bumps a recycled batch buffer's counter (Batch::mark_rewritten) while
  // the training thread may read it through a tensor it still holds (TSan found the race).
  std::shared_ptr<std::atomic<uint64_t>> version = std::make_shared<std::atomic<uint64_t>>(0);
  std::unique_ptr<AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous tensor on `device`.
  static Tensor empty(const Shape& shape, DType dtype, Device device);
  // Uninitialised dense tensor in `format` (ChannelsLast: 4-D, NOTE [ Channels-last ]).
  static Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().sizes; }
  const Shape& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_of(impl().sizes); }
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  size_t element_size() const { return dp::element_size(dtype()); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat format) const { return is_contiguous_in(*this, format); }
  MemoryFormat suggest_memory_format() const { return dp::suggest_memory_format(*this); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  std::string str() const;  // "float32[2, 3] on cpu"

  // Pointer to the first element (storage base + offset).
  void* raw_data() const;
  template <typename T> T* data() const { return static_cast<T*>(raw_data()); }

  // ---- Views (share storage; differentiable) ----
  Tensor view(const Shape& shape) const;     // requires compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // view when possible, else a contiguous copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // narrow + squeeze
  Tensor expand(const Shape& shape) const;          // broadcast with stride 0; -1 keeps a dim
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;

  // ---- Copies ----
  Tensor contiguous() const;  // itself when already contiguous
  // Dense in `format`: itself when it already suggests it, a restrided view when its memory is
  // already in that order (C = 1 or H = W = 1), else a differentiable copy.
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;  // keeps the memory format
  // Cast written in `format` (the same dtype: contiguous(format)); differentiable, and the
  // gradient comes back in this tensor's own format.
  Tensor to(DType dtype, MemoryFormat format) const;
  // Copy on `device` (itself when already there); keeps a channels-last layout, as PyTorch's
  // preserve_format, anything else arrives contiguous. Differentiable.
  Tensor to(Device device) const;
  Tensor detach() const;  // shares storage, no autograd history
  // A view with these sizes and strides at the same offset, without autograd history: for
  // handing a kernel another description of the same memory. The caller keeps it inside t's elements.
  Tensor detached_as_strided(const Shape& sizes, const Shape& strides) const;
  // In-place copy from src (broadcast, cast and cross-device as needed); not differentiable.
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }

  // Value of a one-element tensor, converted to T (synchronises with the device).
  template <typename T> T item() const;
  // All elements in row-major order as T, on the host (synchronises with the device).
  template <typename T> std::vector<T> to_vector() const;

  // ---- Autograd ----
  bool requires_grad() const { return impl_ && impl().autograd && impl().autograd->requires_grad; }
  Tensor& set_requires_grad(bool requires_grad);
  bool is_leaf() const { return !impl().autograd || !impl().autograd->grad_fn; }
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> fn);  // used by ops when recording
  // Registers a hook fired once per backward when this leaf's gradient is final.
  void register_grad_ready_hook(GradReadyHook hook);
  // The tensor a backward writes this leaf's gradient into when .grad is unset (NOTE [ Gradient
  // homes ] in autograd/engine.h): the leaf's shape, dtype and device, contiguous; undefined
  // clears it.
  void set_grad_home(const Tensor& home);
  Tensor grad_home() const;
  // Reverse-mode autodiff from this tensor; `grad` defaults to ones for a one-element tensor.
  void backward(const Tensor& grad = Tensor()) const;

  uint64_t version() const { return impl().version->load(std::memory_order_relaxed); }
  void bump_version() const { impl().version->fetch_add(1, std::memory_order_relaxed); }

  TensorImpl& impl() const {
    DP_CHECK(impl_ != nullptr, "use of an undefined tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  Tensor make_view(Shape sizes, Shape strides, int64_t offset) const;
  Tensor view_like(Shape sizes, Shape strides) const;
  std::shared_ptr<TensorImpl> impl_;
};

// Checks used by ops: same device / expected dtype, with the op's name in the message.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& t);

}  // namespace dp
