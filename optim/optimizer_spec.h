// The optimizer section of a recipe as plain options: the names of the optimisers, their keys
// and each optimiser's defaults. Kept apart from the factory (optim/registry.h) so that the YAML
// layer (launch/config.h) and the config fuzzer need no tensor code.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dp {

inline constexpr std::array<std::string_view, 5> kOptimizerNames = {"sgd", "adamw", "lars", "lamb", "shampoo"};

// The YAML optimizer section (launch/config.h's OptimizerConfig is this struct; the YAML layer
// parses and prints it). A recipe may set only the keys its optimiser reads (optimizer_keys);
// unset optionals take the optimiser's default (config loading fills them in).
struct OptimizerSpec {
  std::string name = "sgd";
  double lr = 0.05;
  double momentum = 0.9;          // sgd, lars
  double dampening = 0.0;         // sgd
  bool nesterov = false;          // sgd
  std::optional<double> weight_decay;  // sgd 0, adamw 0.01, lars 0, lamb 0.01
  std::vector<double> betas = {0.9, 0.999};  // [β1, β2]: adamw, lamb (β2 < 1); shampoo (β2 = 1: plain sums)
  std::optional<double> eps;           // adamw 1e-8, lamb 1e-6, lars 0, shampoo 1e-12
  double eta = 0.001;                  // lars trust coefficient
  bool lr_outside_momentum = false;    // lars variant
  double max_grad_norm = 1.0;          // lamb global clipping (0: off)
  double clip_grad_norm = 0.0;         // any optimiser: global-norm clipping by the caller before step() (0: off)
  std::optional<bool> exclude_1d;      // sgd, adamw, shampoo false; lars, lamb true
  std::vector<std::string> exclude_names;  // name substrings excluded as well
  // shampoo (optim/shampoo.h, Meta's distributed_shampoo names)
  int64_t max_preconditioner_dim = 1024;
  int64_t precondition_frequency = 1;
  int64_t start_preconditioning_step = -1;  // -1: precondition_frequency
  std::string grafting = "adam";            // none | sgd | adagrad | adam
  double grafting_eps = 1e-8;
  double grafting_beta2 = 0.999;
};

// The chosen optimiser's default for a key left unset; an unknown name is a dp::Error.
double default_weight_decay(const std::string& name);
double default_eps(const std::string& name);
bool default_exclude_1d(const std::string& name);
// The optimizer-section keys that optimiser `name` reads: name, lr, weight_decay, clip_grad_norm,
// exclude_1d and exclude_names for every one, then its own (sgd: momentum, dampening, nesterov;
// lars: momentum, eta, eps, lr_outside_momentum; ...). The config refuses a key the chosen
// optimiser does not read, as it refuses an unknown one: `eta` under SGD is a mistake, not a
// setting. An unknown name is a dp::Error.
const std::vector<std::string_view>& optimizer_keys(const std::string& name);

// The error for a name not in kOptimizerNames, listing them.
[[noreturn]] void throw_unknown_optimizer(const std::string& name);

}  // namespace dp
