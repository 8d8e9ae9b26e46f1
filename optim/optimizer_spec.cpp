#include "optim/optimizer_spec.h"

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

}  // namespace dp
