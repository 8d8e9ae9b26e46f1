#include "runtime/nn/module.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>

#include "runtime/autograd/grad_mode.h"
#include "runtime/core/error.h"

namespace dp::nn {

namespace {
// Whether two tensors of one shape hold the same values (compared as float64 on the host).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return a.to(kFloat64).to_vector<double>() == b.to(kFloat64).to_vector<double>();
}
}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  DP_CHECK(!name.empty() && name.find('.') == std::string::npos, "register_", what, ": invalid name '", name,
           "' (names must be non-empty and contain no '.')");
  auto taken = [&](const auto& entries) {
    for (const auto& [existing, value] : entries)
      if (existing == name) return true;
    return false;
  };
  DP_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), "register_", what, ": the name '", name,
           "' is already used by a parameter, buffer or submodule of this module");
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name, "parameter");
  DP_CHECK(t.defined(), "register_parameter: '", name, "' is an undefined tensor");
  DP_CHECK(t.is_leaf(), "register_parameter: '", name, "' must be a leaf tensor (detach() it first), got ",
           t.str());
  t.set_requires_grad(true);
  parameters_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name, "buffer");
  DP_CHECK(t.defined(), "register_buffer: '", name, "' is an undefined tensor");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  DP_CHECK(module != nullptr, "register_module: '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, bool parameters, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : parameters ? parameters_ : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", parameters, out);
}

void Module::collect_state(const std::string& prefix, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

std::vector<NamedTensor> Module::state_dict() const {
  std::vector<NamedTensor> out;
  collect_state("", out);
  return out;
}

std::vector<NamedTensor> without_tied_duplicates(std::vector<NamedTensor> state) {
  std::set<const TensorImpl*> seen;
  std::erase_if(state, [&](const NamedTensor& entry) { return !seen.insert(entry.second.impl_ptr().get()).second; });
  return state;
}

Module::LoadReport Module::load_state_dict(const std::vector<NamedTensor>& state, bool strict) {
  const std::vector<NamedTensor> mine = state_dict();
  std::map<std::string, const Tensor*> given;
  LoadReport report;
  std::vector<std::string> problems, duplicated;
  for (const auto& [name, t] : state)
    if (!given.emplace(name, &t).second) duplicated.push_back(name);
  std::vector<std::pair<Tensor, const Tensor*>> copies;
  std::set<std::string> known;
  // NOTE [ Tied parameters ]: a tensor this model holds under several names needs one of them in
  // the state (Hugging Face files keep one); when several are given they must be equal.
  std::map<const TensorImpl*, std::string> first_name;  // of each tensor given in the state
  std::map<const TensorImpl*, std::vector<std::string>> names_of;
  for (const auto& [name, t] : mine) names_of[t.impl_ptr().get()].push_back(name);
  for (const auto& [name, t] : mine) {
    known.insert(name);
    auto it = given.find(name);
    const TensorImpl* id = t.impl_ptr().get();
    if (it == given.end()) {
      const auto& tied = names_of[id];
      const bool given_elsewhere =
          std::any_of(tied.begin(), tied.end(), [&](const std::string& other) { return given.count(other) > 0; });
      if (!given_elsewhere) report.missing.push_back(name);
      continue;
    }
    const Tensor& value = *it->second;
    if (!value.defined() || value.shape() != t.shape()) {
      problems.push_back("'" + name + "' is " + (value.defined() ? value.str() : "undefined") + " in the state but " +
                         t.str() + " in the model");
      continue;
    }
    auto [first, fresh] = first_name.emplace(id, name);
    if (fresh) {
      copies.emplace_back(t, &value);
    } else if (!same_values(value, *given.at(first->second))) {
      problems.push_back("'" + name + "' and '" + first->second +
                         "' are one tied tensor in the model but differ in the state");
    }
  }
  for (const auto& [name, t] : state)
    if (!known.count(name)) report.unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 20; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 20) out += ", ... (" + std::to_string(names.size()) + " in all)";
    return out;
  };
  if (!duplicated.empty()) problems.push_back("given more than once: " + list(duplicated));
  if (strict && !report.missing.empty())
    problems.push_back(std::to_string(report.missing.size()) + " missing: " + list(report.missing));
  if (strict && !report.unexpected.empty())
    problems.push_back(std::to_string(report.unexpected.size()) + " unexpected: " + list(report.unexpected));
  if (!problems.empty()) {
    std::string text = "load_state_dict: the state does not fit this model";
    for (const std::string& p : problems) text += "\n  " + p;
    throw Error(text);
  }
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src->dtype() == dst.dtype() ? *src : src->to(dst.dtype()));
  return report;
}

namespace {
// NOTE [ Tied parameters ]: one tensor registered under several names (BERT's MLM decoder is the
// word embedding) is one parameter: the first name in module order names it.
std::vector<NamedTensor> without_repeats(std::vector<NamedTensor> named) {
  std::set<const TensorImpl*> seen;
  std::vector<NamedTensor> out;
  out.reserve(named.size());
  for (auto& entry : named)
    if (seen.insert(entry.second.impl_ptr().get()).second) out.push_back(std::move(entry));
  return out;
}
}  // namespace

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", /*parameters=*/true, out);
  return without_repeats(std::move(out));
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", /*parameters=*/false, out);
  return without_repeats(std::move(out));
}

namespace {
std::vector<Tensor> values(const std::vector<NamedTensor>& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}
}  // namespace

std::vector<Tensor> Module::parameters() const { return values(named_parameters()); }
std::vector<Tensor> Module::buffers() const { return values(named_buffers()); }

void Module::collect_modules(const std::string& prefix, std::vector<std::pair<std::string, Module*>>& out) {
  out.emplace_back(prefix, this);
  for (const auto& [name, child] : children_) child->collect_modules(prefix.empty() ? name : prefix + "." + name, out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::name_modules_for_profiling() {
  std::unordered_set<const Module*> named;
  for (const auto& [name, module] : named_modules())
    if (!name.empty() && named.insert(module).second) module->profile_name_ = std::make_shared<const std::string>(name);
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad(bool set_to_none) { nn::zero_grad(parameters(), set_to_none); }

void zero_grad(const std::vector<Tensor>& params, bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) p.set_grad(Tensor());
    else g.zero_();
  }
}

}  // namespace dp::nn
