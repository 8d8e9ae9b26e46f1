// Dynamic loss scaling with torch.cuda.amp.GradScaler's semantics, decided on the device.
//
// NOTE [ Loss scaling on the device ]
// float16 gradients underflow where float32 ones do not, so the loss is multiplied by a scale S
// before backward and the gradients divided by S before the optimiser. After backward (and, in a
// data-parallel run, after the all-reduce: every rank then sees the same gradients and takes the
// same decision with no collective of its own), unscale() multiplies every gradient by 1/S in one
// multi-tensor pass and notes in found_inf whether any value was inf or NaN. A step with such a
// gradient is skipped, S backs off (×backoff_factor) and the growth count restarts; after
// growth_interval good steps in a row S grows (×growth_factor), never to inf. S, the growth
// count and found_inf are one-element device tensors written by backend kernels
// (Backend::amp_unscale_and_check, amp_update_scale), so scaling, checking and updating never
// read a value back to the host. step() hands found_inf to the optimiser, whose kernels do
// nothing when it is set (NOTE [ Device-resident optimiser step ] in optim/optimizer.h): unlike
// torch's GradScaler.step, nothing is read on the host for SGD, AdamW and LARS.
// found_inf is the step's verdict whether or not scaling is enabled: device-side clipping
// (clip_grad_norm_on_device_) sets it for a non-finite norm, and update() counts skipped steps
// (in total and in a row, on the device) and clears it in both cases.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/tensor/tensor.h"

namespace dp {

class Optimizer;

// torch.cuda.amp.GradScaler's defaults.
struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  // Off: scale() returns the loss, unscale() does nothing, step() always steps, update() does
  // nothing (so a trainer calls the same four functions whether or not it scales).
  bool enabled = true;
};

class GradScaler {
 public:
  // The scale, growth count and found_inf live on `device` (where the gradients are).
  GradScaler(Device device, const GradScalerOptions& options = {});

  bool enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // loss · S, differentiable (backward of the result gives gradients scaled by S).
  Tensor scale(const Tensor& loss) const;

  // Unscales the gradients of `params` in place (parameters without one are skipped; a
  // non-contiguous gradient is replaced by a contiguous copy) and notes whether any was not
  // finite. Call it once per step, after the gradients are complete (after the all-reduce), and
  // before clipping (which then sees true norms). A second call before update() is an error,
  // as in PyTorch.
  void unscale(const std::vector<Tensor>& params);

  // optimizer.step({found_inf, lr}): the update happens unless this step's gradients had an inf
  // or NaN, decided by the optimiser's kernels (or read on the host by a host-gated optimiser).
  // Unscales first when enabled and unscale() was not called. `lr` (float64 [], optional) is the
  // device-resident lr (ScheduleClock::next_lr).
  void step(Optimizer& optimizer, const Tensor& lr = Tensor());
  // Whether this step was skipped: reads found_inf (a host sync: for tests and logs). Between
  // step() and update().
  bool step_skipped() const;

  // S for the next step from this step's verdict (when enabled), the skip counters advanced, then
  // the verdict cleared. Once per step, after step().
  void update();
  // Steps skipped so far, and the current run of consecutive skipped steps (host reads: logs and
  // divergence checks).
  int64_t skipped_steps() const;
  int64_t skipped_in_a_row() const;

  // One-element float32 tensors on the device: 1 when this step's gradients were not all finite.
  const Tensor& found_inf() const { return found_inf_; }
  const Tensor& scale_tensor() const { return scale_; }
  // The current S and growth count, read from the device (a sync on a GPU: for logs, not steps).
  double get_scale() const;
  int64_t growth_tracker() const;

  // "scale" (float32) and "growth_tracker" (int32), one-element tensors (copies), as a
  // checkpoint stores them; load_state_dict checks names, dtypes and sizes.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  GradScalerOptions options_;
  Tensor scale_;           // float32 []
  Tensor growth_tracker_;  // int32 []
  Tensor found_inf_;       // float32 []
  Tensor skipped_total_;   // int64 []
  Tensor skip_run_;        // int64 []
  bool unscaled_ = false;  // unscale() ran since the last update()
};

}  // namespace dp
