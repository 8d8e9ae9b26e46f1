// Optimiser interface over parameter groups, as torch.optim.Optimizer.
//
// A group is a list of parameters sharing a learning rate, a weight decay and whether the
// trust-ratio optimisers (LARS, LAMB) adapt its step; make_param_groups (param_groups.h) builds
// the usual split from a model's named parameters: biases and normalisation parameters in a
// group with no decay and no adaptation.
//
// NOTE [ Optimiser state ]
// Per-parameter state is a step count and named buffers (SGD/LARS "momentum_buffer", AdamW/LAMB
// "exp_avg" and "exp_avg_sq"), kept here and indexed [group][param] in construction order.
// state_dict() names them as torch's state_dict numbers them, counting parameters across groups
// in order: "state.<k>.<buffer>" and "state.<k>.step" (int64, 0-d). The entries are plain named
// tensors, so they can be written with runtime/io/safetensors and read back by position into an
// optimiser built over the same groups; load_state_dict then continues bit-identically. The step
// count is an int64 one-element tensor on the parameter's device (NOTE below).
//
// NOTE [ Device-resident optimiser step ]
// A mixed-precision step decides on the device whether it happens (the loss scaler's found_inf,
// a non-finite clipping norm) and which lr it uses (a schedule whose clock does not advance on
// skipped steps). step(DeviceStep) takes both as device tensors. Optimisers whose update is
// entirely device kernels (SGD, AdamW, LARS, LAMB: steps_on_device()) hand them to the kernels through
// StepControl (backend.h): a kernel reads found_inf and writes nothing when it is set, reads the
// lr and the parameter's step count, and the counts advance with count_steps(IfApplied) — the
// host reads nothing and waits for nothing, so the step can be captured as a CUDA graph. Shampoo,
// whose roots are computed on the host, reads found_inf and lr on the host first: one device→host
// read per step on a GPU.
// A skipped step leaves weights, buffers and step counts bit-identical, on either path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/tensor/tensor.h"

namespace dp {

struct ParamGroup {
  ParamGroup() = default;
  ParamGroup(std::vector<Tensor> params_, double lr_, double weight_decay_ = 0.0, bool adapt_ = true)
      : params(std::move(params_)), lr(lr_), weight_decay(weight_decay_), adapt(adapt_) {}

  std::vector<Tensor> params;
  double lr = 0.0;
  double weight_decay = 0.0;
  // Trust-ratio adaptation (LARS, LAMB); false for parameters excluded from it (trust 1).
  bool adapt = true;
  // set_lr(lr) gives this group lr · lr_scale (a per-group lr under one schedule).
  double lr_scale = 1.0;
  // Optional, parallel to params: names for messages (filled by make_param_groups).
  std::vector<std::string> names;
};

// What a step may take from device memory (NOTE [ Device-resident optimiser step ]); each
// tensor optional, on the parameters' device.
struct DeviceStep {
  Tensor found_inf;  // float32 []: nonzero → the step changes nothing
  Tensor lr;         // float64 []: the learning rate, each group using lr[0] · lr_scale (replaces set_lr)
};

class Optimizer {
 public:
  // Each parameter must be a leaf that requires grad and appear in only one group.
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "sgd", "adamw", ... (the YAML optimizer.name).
  virtual std::string name() const = 0;
  // One update of every parameter that has a gradient; parameters without one are skipped.
  void step() { step(DeviceStep{}); }
  // The same, gated and driven by device values (NOTE [ Device-resident optimiser step ]).
  void step(const DeviceStep& device);
  // True when step(DeviceStep) never reads a device value on the host.
  virtual bool steps_on_device() const { return false; }
  // set_to_none drops the gradients; otherwise they are zeroed in place.
  void zero_grad(bool set_to_none = true);

  // Sets the learning rate of every group to lr · its lr_scale (what an LR schedule drives).
  void set_lr(double lr);
  // Mutable for lr / weight_decay / adapt; the parameter lists are fixed at construction.
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // See NOTE [ Optimiser state ]. Buffers are shared, not copied (clone them to snapshot).
  // Optimisers that keep state of their own (Shampoo) override both.
  virtual std::vector<std::pair<std::string, Tensor>> state_dict() const;
  // Replaces the whole state; an unknown name, a missing step, a wrong shape or dtype is a
  // dp::Error naming the entry. Values are copied into fresh tensors on the parameter's device.
  virtual void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

  // Step count of a parameter (0 before its first update) and a named buffer (undefined when
  // the parameter has none yet).
  // (Reads the device count: for tests and logs.)
  virtual int64_t step_count(size_t group, size_t index) const;
  Tensor state_buffer(size_t group, size_t index, const std::string& buffer) const;

 protected:
  // One update with the control resolved: `device` holds what the subclass passes to its kernels
  // (steps_on_device()), or nothing (host-gated: found_inf was zero and the lr already set).
  virtual void update(const DeviceStep& device) = 0;

  struct ParamState {
    Tensor step;  // int64 []: updates applied so far; undefined before the first step
    std::map<std::string, Tensor> buffers;
  };
  // The parameter's step counter, created as 0 on its device when missing.
  const Tensor& step_counter(size_t group, size_t index);
  // The StepControl of one parameter's kernel: found_inf, the lr (scaled by its group) and its
  // step counter.
  StepControl control_for(const DeviceStep& device, size_t group, size_t index);
  // The backend of the items' parameters (a multi-tensor update runs on one device): a dp::Error
  // naming both devices when the parameters are spread over several. items must not be empty.
  template <typename Item>
  Backend& single_device_backend(const std::vector<Item>& items) const {
    const Device device = items.front().param.device();
    for (const Item& it : items) check_same_device(device, it.param);
    return device.backend();
  }
  void check_same_device(const Device& device, const Tensor& param) const;
  // After the kernels of a step: advance these counters unless found_inf (undefined: always).
  static void count_applied(const std::vector<Tensor>& counters, const Tensor& found_inf);
  // The buffers this optimiser keeps per parameter (load_state_dict accepts only these).
  virtual std::vector<std::string> state_names() const = 0;
  ParamState& state(size_t group, size_t index) { return state_[group][index]; }
  // Buffer `buffer` of the parameter, created zero-filled with its shape, dtype and device when missing.
  Tensor& zeroed_buffer(size_t group, size_t index, const std::string& buffer);
  // Calls fn(group, index, param, grad) for every parameter with a gradient, in order, after
  // checking that param is contiguous and grad has its dtype (grad made contiguous).
  void for_each_param_with_grad(const std::function<void(size_t, size_t, const Tensor&, const Tensor&)>& fn) const;
  // "group g parameter i (name)" for messages.
  std::string describe_param(size_t group, size_t index) const;
  // One `value` per parameter, indexed [group][param] (per-parameter figures such as trust ratios).
  std::vector<std::vector<double>> per_parameter(double value) const;
  // The trust ratios a step used, [group][param], from where each parameter's ratio is: `index`
  // holds an index into `ratios` (float64 on the device, read here), -1 for ratio 1, NaN for no
  // gradient (kept). For LARS's and LAMB's last_trust_ratios (tests and logs).
  static std::vector<std::vector<double>> trust_ratios_by_index(std::vector<std::vector<double>> index,
                                                                const Tensor& ratios);

  std::vector<ParamGroup> groups_;

 private:
  std::vector<std::vector<ParamState>> state_;  // [group][param]
};

}  // namespace dp
