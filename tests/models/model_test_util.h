// Helpers shared by the model tests.
#pragma once

#include <string>
#include <vector>

#include "runtime/nn/module.h"

namespace dp::testing {

inline std::vector<std::string> parameter_names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

inline int64_t parameter_count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace dp::testing
