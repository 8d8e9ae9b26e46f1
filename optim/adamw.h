// AdamW, as torch.optim.AdamW (amsgrad off; same defaults).
//
// Per parameter, t its update count (1-based), bc_k = 1 − β_k^t:
//   p ← p · (1 − lr·λ)                               (decoupled weight decay)
//   m ← β1·m + (1 − β1)·g;   v ← β2·v + (1 − β2)·g²
//   p ← p − (lr / bc1) · m / (√v / √bc2 + ε)
// One fused Backend::adamw_update pass per parameter tensor.
#pragma once

#include "optim/optimizer.h"

namespace dp {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options);
  // Groups carry their own lr and weight_decay; betas and eps come from options.
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);

  bool steps_on_device() const override { return true; }
  std::string name() const override { return "adamw"; }
  const AdamWOptions& options() const { return options_; }

 protected:
  void update(const DeviceStep& device) override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  AdamWOptions options_;
};

// Betas in [0, 1) and eps >= 0, else a dp::Error naming `who` and the value.
void check_adam_options(const char* who, double beta1, double beta2, double eps);

}  // namespace dp
