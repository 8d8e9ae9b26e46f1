#include "runtime/nn/module.h"

#include "runtime/autograd/grad_mode.h"
#include "runtime/core/error.h"

namespace dp::nn {

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

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> out;
  collect("", /*parameters=*/true, out);
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> out;
  collect("", /*parameters=*/false, out);
  return out;
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
