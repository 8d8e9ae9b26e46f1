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
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dp {

struct LrScheduleOptions {
  double base_lr = 0.0;
  int64_t total_steps = 0;          // the run's length (needed by cosine)
  int64_t warmup_steps = 0;
  std::vector<int64_t> milestones;  // step: absolute steps, ascending
  double gamma = 0.1;               // step: factor per milestone
  double min_lr = 0.0;              // cosine: the floor
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

// "constant", "step" or "cosine"; an unknown name throws dp::Error listing these.
std::unique_ptr<LrSchedule> make_lr_schedule(const std::string& name, const LrScheduleOptions& options);

}  // namespace dp
