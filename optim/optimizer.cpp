#include "optim/optimizer.h"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include "runtime/nn/module.h"
#include "runtime/ops/creation.h"

namespace dp {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  DP_CHECK(!groups_.empty(), "optimizer: no parameter groups given");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    DP_CHECK(group.lr >= 0 && group.weight_decay >= 0 && group.lr_scale >= 0, "optimizer: group ", g,
             " has invalid lr=", group.lr, ", weight_decay=", group.weight_decay, " or lr_scale=", group.lr_scale,
             " (all must be >= 0)");
    DP_CHECK(group.names.empty() || group.names.size() == group.params.size(), "optimizer: group ", g, " has ",
             group.names.size(), " names for ", group.params.size(), " parameters");
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      DP_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), "optimizer: ", describe_param(g, i),
               " must be a leaf tensor that requires grad, got ", p.defined() ? p.str() : "an undefined tensor");
      DP_CHECK(seen.insert(&p.impl()).second, "optimizer: ", describe_param(g, i), " (", p.str(),
               ") appears more than once");
    }
  }
  state_.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) state_[g].resize(groups_[g].params.size());
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) nn::zero_grad(group.params, set_to_none);
}

void Optimizer::step(const DeviceStep& device) {
  if (steps_on_device() || (!device.found_inf.defined() && !device.lr.defined())) {
    update(device);
    return;
  }
  // Host-gated (NOTE [ Device-resident optimiser step ]): the one read of the step.
  if (device.found_inf.defined() && device.found_inf.item<float>() != 0.0f) return;
  if (device.lr.defined()) set_lr(device.lr.item<double>());
  update(DeviceStep{});
}

int64_t Optimizer::step_count(size_t group, size_t index) const {
  const Tensor& count = state_.at(group).at(index).step;
  return count.defined() ? count.item<int64_t>() : 0;
}

const Tensor& Optimizer::step_counter(size_t group, size_t index) {
  Tensor& count = state_.at(group).at(index).step;
  if (!count.defined()) count = scalar_tensor(0, kInt64, groups_[group].params[index].device());
  return count;
}

StepControl Optimizer::control_for(const DeviceStep& device, size_t group, size_t index) {
  StepControl c;
  c.found_inf = device.found_inf;
  c.lr = device.lr;
  c.lr_scale = groups_[group].lr_scale;
  c.step_count = step_counter(group, index);
  return c;
}

void Optimizer::count_applied(const std::vector<Tensor>& counters, const Tensor& found_inf) {
  if (counters.empty()) return;
  counters.front().device().backend().count_steps(
      counters, found_inf, found_inf.defined() ? StepCounting::IfApplied : StepCounting::Always);
}

void Optimizer::check_same_device(const Device& device, const Tensor& param) const {
  DP_CHECK(param.device() == device, name(), ": parameters on ", device.str(), " and ", param.device().str(),
           " (one device per optimiser)");
}

void Optimizer::set_lr(double lr) {
  DP_CHECK(lr >= 0, "optimizer: set_lr(", lr, "): the learning rate must be >= 0");
  for (ParamGroup& group : groups_) group.lr = lr * group.lr_scale;
}

std::string Optimizer::describe_param(size_t group, size_t index) const {
  std::string s = "group " + std::to_string(group) + " parameter " + std::to_string(index);
  if (group < groups_.size() && index < groups_[group].names.size()) s += " (" + groups_[group].names[index] + ")";
  return s;
}

std::vector<std::vector<double>> Optimizer::per_parameter(double value) const {
  std::vector<std::vector<double>> out(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) out[g].assign(groups_[g].params.size(), value);
  return out;
}

std::vector<std::vector<double>> Optimizer::trust_ratios_by_index(std::vector<std::vector<double>> index,
                                                                  const Tensor& ratios) {
  const std::vector<double> r = ratios.defined() ? ratios.to_vector<double>() : std::vector<double>{};  // reads
  for (auto& group : index)
    for (double& v : group)
      if (!std::isnan(v)) v = v < 0 ? 1.0 : r.at(static_cast<size_t>(v));
  return index;
}

Tensor& Optimizer::zeroed_buffer(size_t group, size_t index, const std::string& buffer) {
  Tensor& t = state_[group][index].buffers[buffer];
  if (!t.defined()) {
    const Tensor& p = groups_[group].params[index];
    t = zeros(p.shape(), p.dtype(), p.device());
  }
  return t;
}

Tensor Optimizer::state_buffer(size_t group, size_t index, const std::string& buffer) const {
  const auto& buffers = state_.at(group).at(index).buffers;
  auto it = buffers.find(buffer);
  return it == buffers.end() ? Tensor() : it->second;
}

void Optimizer::for_each_param_with_grad(
    const std::function<void(size_t, size_t, const Tensor&, const Tensor&)>& fn) const {
  DP_CHECK(state_.size() == groups_.size(), name(), ": parameter groups were added after construction");
  for (size_t g = 0; g < groups_.size(); ++g) {
    DP_CHECK(groups_[g].params.size() == state_[g].size(), name(), ": group ", g,
             " gained or lost parameters after construction (its state is indexed by position)");
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& param = groups_[g].params[i];
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      // The kernels walk param, grad and state as flat buffers of one dtype.
      DP_CHECK(param.is_contiguous() && grad.dtype() == param.dtype() && grad.numel() == param.numel(), name(),
               ": ", describe_param(g, i), " must be contiguous with a gradient of its dtype and shape, got param ",
               param.str(), " grad ", grad.str());
      fn(g, i, param, grad.contiguous());
    }
  }
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  size_t k = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i, ++k) {
      const ParamState& s = state_[g][i];
      if (!s.step.defined() && s.buffers.empty()) continue;  // never updated: no state, as torch
      const std::string prefix = "state." + std::to_string(k) + ".";
      out.emplace_back(prefix + "step",
                       s.step.defined() ? s.step.clone() : scalar_tensor(0, kInt64, groups_[g].params[i].device()));
      for (const auto& [buffer, t] : s.buffers)
        if (t.defined()) out.emplace_back(prefix + buffer, t);
    }
  }
  return out;
}

void Optimizer::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  // Position k → (group, index).
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) where.emplace_back(g, i);
  const std::vector<std::string> names = state_names();
  std::vector<std::vector<ParamState>> fresh(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) fresh[g].resize(groups_[g].params.size());
  std::vector<bool> has_step(where.size(), false), has_buffer(where.size(), false);
  for (const auto& [key, value] : state) {
    std::string known;
    for (const std::string& n : names) known += ", " + n;
    const std::string expectation = "expected state.<k>.<step" + known + ">, k < " + std::to_string(where.size());
    DP_CHECK(key.rfind("state.", 0) == 0, name(), ": load_state_dict: unknown entry '", key, "' (", expectation, ")");
    const size_t dot = key.find('.', 6);
    size_t k = 0;
    const char* first = key.data() + 6;
    const char* last = key.data() + (dot == std::string::npos ? key.size() : dot);
    auto [end, ec] = std::from_chars(first, last, k);
    DP_CHECK(dot != std::string::npos && ec == std::errc() && end == last && k < where.size(), name(),
             ": load_state_dict: unknown entry '", key, "' (", expectation, ")");
    const std::string buffer = key.substr(dot + 1);
    const auto [g, i] = where[k];
    const Tensor& p = groups_[g].params[i];
    DP_CHECK(value.defined(), name(), ": load_state_dict: entry '", key, "' is an undefined tensor");
    if (buffer == "step") {
      DP_CHECK(value.numel() == 1, name(), ": load_state_dict: '", key, "' must hold one value, got ", value.str());
      const int64_t count = value.item<int64_t>();
      DP_CHECK(count >= 0, name(), ": load_state_dict: '", key, "' must be >= 0, got ", count);
      fresh[g][i].step = scalar_tensor(static_cast<double>(count), kInt64, p.device());
      has_step[k] = true;
      continue;
    }
    bool known_buffer = false;
    for (const std::string& n : names) known_buffer = known_buffer || n == buffer;
    DP_CHECK(known_buffer, name(), ": load_state_dict: unknown entry '", key, "' (", expectation, ")");
    DP_CHECK(value.shape() == p.shape() && value.dtype() == p.dtype(), name(), ": load_state_dict: '", key,
             "' is ", value.str(), " but ", describe_param(g, i), " is ", p.str());
    Tensor copy = Tensor::empty(p.shape(), p.dtype(), p.device());
    copy.copy_(value);
    fresh[g][i].buffers[buffer] = copy;
    has_buffer[k] = true;
  }
  for (size_t k = 0; k < where.size(); ++k)
    DP_CHECK(has_step[k] || !has_buffer[k], name(), ": load_state_dict: 'state.", k,
             ".step' is missing while the parameter has buffers");
  state_ = std::move(fresh);
}

}  // namespace dp
