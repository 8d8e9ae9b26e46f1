// LAMB (You et al. 2019) with NVIDIA apex FusedLAMB semantics (adam_w_mode, grad_averaging and
// bias_correction on, use_nvlamb off): the BERT optimiser.
//
// Each step, over every parameter that has a gradient (all groups together):
//   N = ‖(g_1, …, g_n)‖ (global norm);  c = N / max_grad_norm when N > max_grad_norm, else 1
//   (max_grad_norm 0 turns this off)
// then per parameter, ĝ = g / c, t its update count (1-based), bc_k = 1 − β_k^t:
//   m ← β1·m + (1 − β1)·ĝ;   v ← β2·v + (1 − β2)·ĝ²
//   u = (m / bc1) / (√(v / bc2) + ε) + λ·w
//   r = ‖w‖ / ‖u‖ where λ ≠ 0 and the group has adapt = true, 1 when either norm is 0; r = 1 elsewhere
//   w ← w − lr·r·u
// So where λ = 0 (e.g. excluded biases and norm weights) the step is a plain Adam step. Step
// counts are per parameter, as torch's optimisers keep them (apex keeps one per group; they
// differ only for a parameter that skips steps without a gradient).
// Every value of a step stays on the parameters' device (NOTE [ Device-resident optimiser step ]):
// N and apex's divisor, the moments and directions, ‖w‖ and ‖u‖, r — no host read, so a GPU step
// never waits here. A non-finite N sets the step's found_inf: the step is skipped, as the loss
// scaler skips one (without a caller's found_inf, N flows into the update as in apex).
#pragma once

#include "optim/optimizer.h"

namespace dp {

struct LambOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0: no global clipping
};

class LAMB : public Optimizer {
 public:
  LAMB(std::vector<Tensor> params, const LambOptions& options);
  // Groups carry their own lr, weight_decay and adapt; the rest comes from options.
  LAMB(std::vector<ParamGroup> groups, const LambOptions& options);

  std::string name() const override { return "lamb"; }
  bool steps_on_device() const override { return true; }
  const LambOptions& options() const { return options_; }
  // The global gradient norm N of the last step (before clipping). Reads the device: for tests
  // and logs.
  double last_grad_norm() const;
  // The ratio r each parameter took in the last step; [group][param], NaN where no gradient.
  // Reads the device: for tests and logs.
  std::vector<std::vector<double>> last_trust_ratios() const;

 protected:
  void update(const DeviceStep& device) override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  LambOptions options_;
  Tensor last_grad_norm_;                               // float64 [] on the device
  Tensor last_ratios_;                                  // float64 [adapted parameters]
  std::vector<std::vector<double>> last_ratio_index_;  // into last_ratios_; -1: not adapted; NaN: no grad
};

}  // namespace dp
