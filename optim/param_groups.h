// Parameter groups from a model's named parameters: which parameters are excluded from weight
// decay and from trust-ratio adaptation (LARS, LAMB).
//
// The MLPerf ResNet (LARS) and BERT (LAMB) references exclude biases and normalisation
// parameters. By kind: every parameter with fewer than 2 dimensions is one of those (conv and
// linear biases, BatchNorm/LayerNorm weights and biases). By name: any parameter whose name
// (as named_parameters() gives it, e.g. "layer1.0.bn2.weight") contains one of the substrings.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace dp {

struct ExclusionRule {
  bool one_dimensional = true;            // exclude parameters with dim() < 2
  std::vector<std::string> name_contains; // and those whose name contains one of these
};

bool is_excluded(const std::string& name, const Tensor& param, const ExclusionRule& rule);

// Two groups, in this order: the others (lr, weight_decay, adapt = true) and the excluded ones
// (lr, weight decay 0, adapt = false); a group that would be empty is left out. Parameter order
// within a group follows `named`; names are filled.
std::vector<ParamGroup> make_param_groups(const std::vector<std::pair<std::string, Tensor>>& named, double lr,
                                          double weight_decay, const ExclusionRule& rule);

}  // namespace dp
