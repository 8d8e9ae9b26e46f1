// One factory for every optimiser: the trainer (and anything else driven by a recipe) builds
// its optimiser here from plain options and the model's named parameters.
//
// Adding an optimiser: its class in optim/<name>.{h,cpp}, its name in kOptimizerNames, its
// defaults in the three default_* functions (and OptimizerSpec) and one branch in make_optimizer; the YAML side
// (launch/config.cpp) takes the names from kOptimizerNames.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "runtime/core/device.h"

namespace dp {

class ProcessGroup;

inline constexpr std::array<std::string_view, 5> kOptimizerNames = {"sgd", "adamw", "lars", "lamb", "shampoo"};

// The YAML optimizer section (launch/config.h's OptimizerConfig is this struct; the YAML layer
// parses and prints it). Keys used by one optimiser only are ignored by the others. Unset
// optionals take the optimiser's default (config loading fills them in).
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

// What an optimiser may need beyond its parameters. Shampoo spreads its root computations over
// the process group's ranks (null: all local) and keeps its float64 state on `host` (a CPU device;
// invalid: the parameters' device, which must then be the CPU), computing there with `threads`.
struct OptimizerContext {
  ProcessGroup* process_group = nullptr;
  Device host{};
  int threads = 0;  // CPU threads for host-side work (Shampoo's products and roots); 0: OpenMP's default
};

double default_weight_decay(const std::string& name);
double default_eps(const std::string& name);
bool default_exclude_1d(const std::string& name);

// Groups from make_param_groups (the exclusion rule from exclude_1d / exclude_names), then the
// optimiser. An unknown name or an invalid value is a dp::Error naming the optimizer.<key>.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec,
                                          const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                                          const OptimizerContext& context = {});

}  // namespace dp
