#include "optim/optimizer_spec.h"

#include <initializer_list>

#include "runtime/core/error.h"

namespace dp {

[[noreturn]] void throw_unknown_optimizer(const std::string& name) {
  std::string list;
  for (std::string_view n : kOptimizerNames) list += (list.empty() ? "" : ", ") + std::string(n);
  throw Error("optimizer.name: unknown optimizer '" + name + "' (known: " + list + ")");
}

double default_weight_decay(const std::string& name) {
  if (name == "sgd" || name == "lars" || name == "shampoo") return 0.0;
  if (name == "adamw" || name == "lamb") return 0.01;
  throw_unknown_optimizer(name);
}

double default_eps(const std::string& name) {
  if (name == "sgd" || name == "lars") return 0.0;
  if (name == "adamw") return 1e-8;
  if (name == "lamb") return 1e-6;
  if (name == "shampoo") return 1e-12;
  throw_unknown_optimizer(name);
}

bool default_exclude_1d(const std::string& name) {
  if (name == "sgd" || name == "adamw" || name == "shampoo") return false;
  if (name == "lars" || name == "lamb") return true;
  throw_unknown_optimizer(name);
}

const std::vector<std::string_view>& optimizer_keys(const std::string& name) {
  using Keys = std::vector<std::string_view>;
  auto common_and = [](std::initializer_list<std::string_view> own) {
    Keys keys = {"name", "lr", "weight_decay", "clip_grad_norm", "exclude_1d", "exclude_names"};
    keys.insert(keys.end(), own);
    return keys;
  };
  static const Keys sgd = common_and({"momentum", "dampening", "nesterov"});
  static const Keys adamw = common_and({"betas", "eps"});
  static const Keys lars = common_and({"momentum", "eta", "eps", "lr_outside_momentum"});
  static const Keys lamb = common_and({"betas", "eps", "max_grad_norm"});
  static const Keys shampoo = common_and({"betas", "eps", "max_preconditioner_dim", "precondition_frequency",
                                          "start_preconditioning_step", "grafting", "grafting_eps", "grafting_beta2"});
  if (name == "sgd") return sgd;
  if (name == "adamw") return adamw;
  if (name == "lars") return lars;
  if (name == "lamb") return lamb;
  if (name == "shampoo") return shampoo;
  throw_unknown_optimizer(name);
}

}  // namespace dp
