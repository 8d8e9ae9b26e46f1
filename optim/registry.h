// One factory for every optimiser: the trainer (and anything else driven by a recipe) builds
// its optimiser here from plain options and the model's named parameters.
//
// Adding an optimiser: its class in optim/<name>.{h,cpp}; its name in kOptimizerNames, its keys
// in OptimizerSpec and its defaults in the default_* functions (optim/optimizer_spec.h); one
// branch in make_optimizer. The YAML side (launch/config.cpp) takes the names from kOptimizerNames.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "optim/optimizer_spec.h"
#include "runtime/core/device.h"

namespace dp {

class ProcessGroup;

// What an optimiser may need beyond its parameters. Shampoo spreads its root computations over
// the process group's ranks (null: all local), keeps its float64 state on the parameters' device
// (NOTE [ Shampoo on a device ]) and computes its roots (and, on a CPU, everything) with `threads`.
struct OptimizerContext {
  ProcessGroup* process_group = nullptr;
  int threads = 0;  // CPU threads for host-side work (Shampoo's products and roots); 0: OpenMP's default
};


// Groups from make_param_groups (the exclusion rule from exclude_1d / exclude_names), then the
// optimiser. An unknown name or an invalid value is a dp::Error naming the optimizer.<key>.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec,
                                          const std::vector<std::pair<std::string, Tensor>>& named_parameters,
                                          const OptimizerContext& context = {});

}  // namespace dp
