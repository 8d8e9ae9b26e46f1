#include "optim/param_groups.h"

#include "runtime/core/error.h"

namespace dp {

bool is_excluded(const std::string& name, const Tensor& param, const ExclusionRule& rule) {
  if (rule.one_dimensional && param.dim() < 2) return true;
  for (const std::string& s : rule.name_contains)
    if (!s.empty() && name.find(s) != std::string::npos) return true;
  return false;
}

std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, Tensor>>& named, double lr,
                                          double weight_decay, const ExclusionRule& rule) {
  DP_CHECK(!named.empty(), "make_param_groups: the model has no parameters");
  ParamGroup kept{{}, lr, weight_decay, /*adapt=*/true};
  ParamGroup excluded{{}, lr, 0.0, /*adapt=*/false};
  for (const auto& [name, p] : named) {
    ParamGroup& g = is_excluded(name, p, rule) ? excluded : kept;
    g.params.push_back(p);
    g.names.push_back(name);
  }
  std::vector<ParamGroup> groups;
  if (!kept.params.empty()) groups.push_back(std::move(kept));
  if (!excluded.params.empty()) groups.push_back(std::move(excluded));
  return groups;
}

}  // namespace dp
