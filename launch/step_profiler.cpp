#include "launch/step_profiler.h"

#include <cstdio>

namespace dp {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Comm: return "comm";
    case Phase::Optimizer: return "optimizer";
    case Phase::kCount: break;
  }
  return "?";
}

void StepProfiler::begin(Phase p) {
  Clock::time_point now = Clock::now();
  if (running_) totals_[static_cast<size_t>(current_)] += std::chrono::duration<double>(now - started_).count();
  current_ = p;
  started_ = now;
  running_ = true;
}

void StepProfiler::end() {
  if (!running_) return;
  totals_[static_cast<size_t>(current_)] += std::chrono::duration<double>(Clock::now() - started_).count();
  running_ = false;
}

double StepProfiler::total_seconds() const {
  double t = 0;
  for (double v : totals_) t += v;
  return t;
}

void StepProfiler::reset() {
  totals_.fill(0.0);
  steps_ = 0;
  running_ = false;
}

std::string StepProfiler::summary() const {
  const double steps = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  std::string out;
  char buf[64];
  for (size_t i = 0; i < totals_.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%s %.2f ms", i ? " | " : "", phase_name(static_cast<Phase>(i)),
                  1e3 * totals_[i] / steps);
    out += buf;
  }
  return out + " per step";
}

}  // namespace dp
