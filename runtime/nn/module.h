// nn::Module: the PyTorch module model — a tree of modules, each owning named parameters
// (trainable leaves) and buffers (state such as BatchNorm's running statistics).
//
// NOTE [ Module names ]
// named_parameters() / named_buffers() walk the tree exactly as torch.nn.Module does: a module's
// own entries first, in registration order, then each child in registration order, recursively
// (pre-order). Names are dotted paths: "fc.weight", "features.0.bias",
// "layer1.0.bn1.running_mean". Checkpoints and the PyTorch comparisons depend on this order
// and spelling, so keep registration order identical to the torch model being mirrored.
//
// Modules hold Tensor handles; a registered tensor and the member that a layer keeps for its
// forward are the same TensorImpl, so loading values must write in place (copy_ under
// NoGradGuard), never rebind the member.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/nvtx.h"
#include "runtime/tensor/tensor.h"

namespace dp::nn {

using NamedTensor = std::pair<std::string, Tensor>;

// `state` with every tensor once: one held under several names (NOTE [ Tied parameters ] in
// module.cpp) keeps its first, as Hugging Face's safetensors files do; load_state_dict takes it
// back whole. (A torch state_dict lists every name, sharing the storage.)
std::vector<NamedTensor> without_tied_duplicates(std::vector<NamedTensor> state);

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // ---- Registration (names: non-empty, no '.', unique within this module) ----
  // Marks `t` as a trainable leaf (requires_grad) and returns it.
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- Traversal (see NOTE [ Module names ]) ----
  // A tensor registered under several names (tied weights) is listed once, under the first name,
  // as torch's named_parameters() does; state_dict() lists it under every name (NOTE [ Tied
  // parameters ] in module.cpp).
  std::vector<NamedTensor> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<NamedTensor> named_buffers() const;
  std::vector<Tensor> buffers() const;
  // This module's direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const { return children_; }
  // Pre-order over the tree, this module first with the name "" (as torch's named_modules()).
  // The pointers are owned by the tree and live as long as this module.
  std::vector<std::pair<std::string, Module*>> named_modules();

  // ---- Profiling names (NOTE [ NVTX ranges ] in core/nvtx.h) ----
  // Names every module below this one by its dotted path (named_modules()'s; a module reachable
  // twice keeps its first), for its forward's NVTX range and the autograd nodes it makes. This
  // module stays unnamed: its forward is already the step's `forward` range. models/registry
  // calls it for every model it builds.
  void name_modules_for_profiling();
  // Opens this module's forward range until the returned object goes out of scope (nothing when no
  // NVTX tool is attached or the module is unnamed); every forward-like method starts with
  //   const auto range = forward_range();
  [[nodiscard]] nvtx::ModuleRange forward_range() const { return nvtx::ModuleRange(profile_name_); }

  // ---- State (torch's state_dict / load_state_dict) ----
  // Every parameter and buffer by its torch name, in torch's order: each module's parameters,
  // then its buffers, then its children's (what torch.save(model.state_dict()) holds). The
  // tensors are the live ones (shared, not copied).
  std::vector<NamedTensor> state_dict() const;
  // What load_state_dict left out: names this model has that `state` lacks, and the reverse.
  struct LoadReport {
    std::vector<std::string> missing, unexpected;
  };
  // Copies each entry of `state` into the tensor of that name, in place (under NoGradGuard),
  // converting the dtype as torch's copy_ does. A shape that differs is always an error; with
  // `strict` a missing or unexpected name is one too. Every problem is listed in one dp::Error
  // and nothing is changed then; without `strict` the names left out are returned. A tied
  // tensor needs only one of its names in `state`; several must hold equal values.
  LoadReport load_state_dict(const std::vector<NamedTensor>& state, bool strict = true);

  // ---- Mode ----
  // Sets training mode on this module and all descendants (Dropout, BatchNorm read it).
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // set_to_none drops the gradients (the next backward allocates fresh ones); otherwise
  // existing gradients are zeroed in place, keeping their storage.
  void zero_grad(bool set_to_none = true);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool parameters, std::vector<NamedTensor>& out) const;
  void collect_state(const std::string& prefix, std::vector<NamedTensor>& out) const;
  void collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out);

  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<const std::string> profile_name_;
  bool training_ = true;
};

// Drops (set_to_none) or zeroes in place the gradients of `params`; shared by Module and the
// optimisers.
void zero_grad(const std::vector<Tensor>& params, bool set_to_none);

}  // namespace dp::nn
