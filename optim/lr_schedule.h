// Learning-rate schedules as pure functions of the global step (0-based): the trainer asks
// lr_at(step) and hands it to Optimizer::set_lr before each step, so a resumed run needs only
// the step number.
//
// NOTE [ LR warmup ]
// With warmup_steps = W > 0, lr rises linearly from 0: lr_at(s) = base_lr · s / W for s < W,
// and from s = W on the schedule below applies (lr_at(W) = base_lr for every schedule whose
// value there is base_lr: constant, cosine, and step with no milestone <= W).
//   constant: base_lr
//   step:     base_lr · gamma^(number of milestones <= s); milestones are absolute steps, as
//             torch's MultiStepLR
//   cosine:   min_lr + (base_lr − min_lr) · (1 + cos(π · t)) / 2, t = (s − W) / (total_steps − W),
//             clamped to [0, 1]: base_lr at the end of warmup, min_lr at s = total_steps
//   poly:     min_lr + (base_lr − min_lr) · (1 − t)^power, t as for cosine (MLPerf ResNet-50 with
//             LARS: power 2, min_lr the end lr; tf.train.polynomial_decay after warmup)
//   linear:   poly with power 1 (BERT: warmup then linear decay, to 0 with min_lr 0)
//
// NOTE [ Schedule clock ]
// The step the trainer asks a schedule about is a ScheduleClock's count, which advances after
// each optimiser step. With count_skipped_steps = false a step that was skipped (its gradients
// overflowed: the step's found_inf) leaves the count where it was, so the lr sequence of the
// applied steps is the schedule's, whatever was skipped. Whether a step was skipped is known only
// on the device, so the clock lives there (NOTE [ Device-resident optimiser step ] in
// optim/optimizer.h): the schedule is tabulated once, lr_at(s) for s in [0, steps], and each step
// looks its lr up at the clock's count (Backend::lr_lookup) — the same doubles the host computes,
// with no host read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/tensor/tensor.h"

namespace dp {

struct LrScheduleOptions {
  double base_lr = 0.0;
  int64_t total_steps = 0;          // the run's length (needed by cosine)
  int64_t warmup_steps = 0;
  std::vector<int64_t> milestones;  // step: absolute steps, ascending
  double gamma = 0.1;               // step: factor per milestone
  double min_lr = 0.0;              // cosine: the floor; poly, linear: the end lr
  double power = 2.0;               // poly: the exponent
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleOptions& options);
  virtual ~LrSchedule() = default;
  // The learning rate for global step `step` (>= 0), warmup included.
  double lr_at(int64_t step) const;
  const LrScheduleOptions& options() const { return options_; }

 protected:
  // The schedule after warmup, for step >= warmup_steps.
  virtual double after_warmup(int64_t step) const = 0;
  LrScheduleOptions options_;
};

class ConstantLr : public LrSchedule {
 public:
  using LrSchedule::LrSchedule;

 protected:
  double after_warmup(int64_t step) const override;
};

class StepLr : public LrSchedule {
 public:
  explicit StepLr(const LrScheduleOptions& options);

 protected:
  double after_warmup(int64_t step) const override;
};

class CosineLr : public LrSchedule {
 public:
  explicit CosineLr(const LrScheduleOptions& options);

 protected:
  double after_warmup(int64_t step) const override;
};

// Polynomial decay to min_lr after warmup ("poly", and "linear" with power 1).
class PolyLr : public LrSchedule {
 public:
  explicit PolyLr(const LrScheduleOptions& options, const char* name = "poly");

 protected:
  double after_warmup(int64_t step) const override;
};

// See NOTE [ Schedule clock ]. The table holds `steps` + 1 entries (8 bytes each): a clock past
// `steps` keeps the last lr.
class ScheduleClock {
 public:
  ScheduleClock(const LrSchedule& schedule, int64_t steps, Device device, bool count_skipped_steps = true);
  // The lr for the next optimiser step, float64 [] on the device (written by one device op).
  const Tensor& next_lr();
  // After each step, with the step's verdict (float32 [], or undefined: applied).
  void step_done(const Tensor& found_inf = Tensor());
  // Host reads, for logs and checkpoints: the clock's count and the lr last looked up.
  int64_t steps() const;
  double lr() const;
  void set_steps(int64_t steps);  // resuming

 private:
  Tensor table_;  // float64 [steps + 1]
  Tensor clock_;  // int64 []
  Tensor lr_;     // float64 []
  bool count_skipped_;
};

// "constant", "step", "cosine", "poly" or "linear"; an unknown name throws dp::Error listing these.
std::unique_ptr<LrSchedule> make_lr_schedule(const std::string& name, const LrScheduleOptions& options);

}  // namespace dp
