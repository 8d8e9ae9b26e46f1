#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"

namespace dp {

LrSchedule::LrSchedule(const LrScheduleOptions& options) : options_(options) {
  DP_CHECK(options.base_lr >= 0 && options.warmup_steps >= 0 && options.total_steps >= 0,
           "lr schedule: invalid base_lr=", options.base_lr, " warmup_steps=", options.warmup_steps,
           " total_steps=", options.total_steps, " (all must be >= 0)");
}

double LrSchedule::lr_at(int64_t step) const {
  DP_CHECK(step >= 0, "lr schedule: step must be >= 0, got ", step);
  const int64_t warmup = options_.warmup_steps;
  if (step < warmup) return options_.base_lr * static_cast<double>(step) / static_cast<double>(warmup);
  return after_warmup(step);
}

double ConstantLr::after_warmup(int64_t) const { return options_.base_lr; }

StepLr::StepLr(const LrScheduleOptions& options) : LrSchedule(options) {
  const std::vector<int64_t>& m = options.milestones;
  DP_CHECK(!m.empty() && std::is_sorted(m.begin(), m.end()) && m.front() >= 0,
           "lr schedule 'step': needs at least one milestone, as ascending non-negative steps");
  DP_CHECK(options.gamma > 0, "lr schedule 'step': gamma must be > 0, got ", options.gamma);
}

double StepLr::after_warmup(int64_t step) const {
  const std::vector<int64_t>& m = options_.milestones;
  const auto passed = std::upper_bound(m.begin(), m.end(), step) - m.begin();
  return options_.base_lr * std::pow(options_.gamma, static_cast<double>(passed));
}

CosineLr::CosineLr(const LrScheduleOptions& options) : LrSchedule(options) {
  DP_CHECK(options.total_steps > options.warmup_steps, "lr schedule 'cosine': total_steps (", options.total_steps,
           ") must exceed warmup_steps (", options.warmup_steps, ")");
  DP_CHECK(options.min_lr >= 0 && options.min_lr <= options.base_lr, "lr schedule 'cosine': min_lr=",
           options.min_lr, " must be in [0, base_lr=", options.base_lr, "]");
}

double CosineLr::after_warmup(int64_t step) const {
  const LrScheduleOptions& o = options_;
  const double t = std::clamp(static_cast<double>(step - o.warmup_steps) /
                                  static_cast<double>(o.total_steps - o.warmup_steps),
                              0.0, 1.0);
  return o.min_lr + (o.base_lr - o.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

PolyLr::PolyLr(const LrScheduleOptions& options, const char* name) : LrSchedule(options) {
  DP_CHECK(options.total_steps > options.warmup_steps, "lr schedule '", name, "': total_steps (", options.total_steps,
           ") must exceed warmup_steps (", options.warmup_steps, ")");
  DP_CHECK(options.min_lr >= 0 && options.min_lr <= options.base_lr, "lr schedule '", name, "': min_lr=",
           options.min_lr, " must be in [0, base_lr=", options.base_lr, "]");
  DP_CHECK(options.power > 0, "lr schedule '", name, "': power must be > 0, got ", options.power);
}

double PolyLr::after_warmup(int64_t step) const {
  const LrScheduleOptions& o = options_;
  const double t = std::clamp(static_cast<double>(step - o.warmup_steps) /
                                  static_cast<double>(o.total_steps - o.warmup_steps),
                              0.0, 1.0);
  return o.min_lr + (o.base_lr - o.min_lr) * std::pow(1.0 - t, o.power);
}

std::unique_ptr<LrSchedule> make_lr_schedule(const std::string& name, const LrScheduleOptions& options) {
  if (name == "constant") return std::make_unique<ConstantLr>(options);
  if (name == "step") return std::make_unique<StepLr>(options);
  if (name == "cosine") return std::make_unique<CosineLr>(options);
  if (name == "poly") return std::make_unique<PolyLr>(options);
  if (name == "linear") {
    LrScheduleOptions linear = options;
    linear.power = 1.0;
    return std::make_unique<PolyLr>(linear, "linear");
  }
  throw Error("unknown lr schedule '" + name + "'; known schedules: constant, step, cosine, poly, linear");
}

ScheduleClock::ScheduleClock(const LrSchedule& schedule, int64_t steps, Device device, bool count_skipped_steps)
    : count_skipped_(count_skipped_steps) {
  DP_CHECK(steps >= 0, "ScheduleClock: steps must be >= 0, got ", steps);
  std::vector<double> table(static_cast<size_t>(steps) + 1);
  for (int64_t s = 0; s <= steps; ++s) table[static_cast<size_t>(s)] = schedule.lr_at(s);
  table_ = from_vector(table, {steps + 1}, device);
  clock_ = scalar_tensor(0, kInt64, device);
  lr_ = scalar_tensor(table.front(), kFloat64, device);
}

const Tensor& ScheduleClock::next_lr() {
  lr_.device().backend().lr_lookup(table_, clock_, lr_);
  return lr_;
}

void ScheduleClock::step_done(const Tensor& found_inf) {
  const StepCounting how = count_skipped_ || !found_inf.defined() ? StepCounting::Always : StepCounting::IfApplied;
  clock_.device().backend().count_steps({clock_}, found_inf, how);
}

int64_t ScheduleClock::steps() const { return clock_.item<int64_t>(); }

double ScheduleClock::lr() const { return lr_.item<double>(); }

void ScheduleClock::set_steps(int64_t steps) {
  DP_CHECK(steps >= 0, "ScheduleClock::set_steps: steps must be >= 0, got ", steps);
  clock_.fill_(static_cast<double>(steps));
}

}  // namespace dp
