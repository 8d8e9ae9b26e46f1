// LARS (You et al. 2017) in the MLPerf ResNet-50 reference form.
//
// Per parameter, with λ its group's weight_decay and η the trust coefficient:
//   trust = η·‖w‖ / (‖g‖ + λ·‖w‖ + ε), and 1 when ‖w‖ = 0 or ‖g‖ = 0 or the group has adapt = false
//   lr inside the momentum (default, MLPerf):  buf ← μ·buf − lr·trust·(g + λw);  w ← w + buf
//   lr outside the momentum (option):          buf ← μ·buf + trust·(g + λw);     w ← w − lr·buf
// buf starts at 0. The two forms agree while lr is constant; when lr changes (warmup, decay) the
// first keeps the lr of earlier steps inside the momentum, the second rescales all of it at once.
// Parameters excluded by make_param_groups (biases, norm weights) sit in a group with λ = 0 and
// adapt = false: trust 1 and no decay. All norms of a step come from one squared_norms call, the
// ratios from lars_trust_ratios, and stay on the parameters' device (no host sync in a step).
#pragma once

#include "optim/optimizer.h"

namespace dp {

struct LarsOptions {
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 0.0;
  double eta = 0.001;   // trust coefficient
  double eps = 0.0;
  bool lr_outside_momentum = false;
};

class LARS : public Optimizer {
 public:
  LARS(std::vector<Tensor> params, const LarsOptions& options);
  // Groups carry their own lr, weight_decay and adapt; the rest comes from options.
  LARS(std::vector<ParamGroup> groups, const LarsOptions& options);

  bool steps_on_device() const override { return true; }
  std::string name() const override { return "lars"; }
  const LarsOptions& options() const { return options_; }
  // The trust ratio each parameter took in the last step (1 for excluded ones); [group][param],
  // NaN for parameters that had no gradient. Reads them from the device (a sync): for reports,
  // not for every step.
  std::vector<std::vector<double>> last_trust_ratios() const;

  // η‖w‖ / (‖g‖ + λ‖w‖ + ε), or 1 when either norm is 0.
  static double trust_ratio(double w_norm, double g_norm, double weight_decay, double eta, double eps);

 protected:
  void update(const DeviceStep& device) override;
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }

 private:
  LarsOptions options_;
  Tensor last_ratios_;  // float64 [adapted parameters] on their device
  // [group][param]: index into last_ratios_, -1 when not adapted, NaN when it had no gradient.
  std::vector<std::vector<double>> last_ratio_index_;
};

}  // namespace dp
