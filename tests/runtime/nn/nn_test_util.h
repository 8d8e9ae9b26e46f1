// Helpers shared by the nn module tests.
#pragma once

#include <string>
#include <vector>

#include "runtime/nn/module.h"

namespace dp::nn {

// The names of named_parameters() / named_buffers(), in order.
inline std::vector<std::string> names_of(const std::vector<NamedTensor>& named) {
  std::vector<std::string> out;
  for (const auto& [name, t] : named) out.push_back(name);
  return out;
}

}  // namespace dp::nn
