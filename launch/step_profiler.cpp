#include "launch/step_profiler.h"

#include <cstdio>

#include "runtime/core/nvtx.h"

namespace dp {

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::Data: return "data";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Comm: return "comm";
    case Phase::Optimizer: return "optimizer";
    case Phase::Graph: return "graph";
    case Phase::Checkpoint: return "checkpoint";
    case Phase::kCount: break;
  }
  return "?";
}

StepProfiler::StepProfiler(Backend* device) : device_(device) {
  // A device whose backend makes markers runs asynchronously to the host (NOTE [ Step timing on a GPU ]).
  use_markers_ = device_ != nullptr && device_->make_marker() != nullptr;
}

StepProfiler::~StepProfiler() { close_ranges(); }  // an exception left a step half done

void StepProfiler::close_ranges() {
  if (phase_range_open_) nvtx::pop();
  if (step_range_open_) nvtx::pop();
  phase_range_open_ = step_range_open_ = false;
}

void StepProfiler::add_host_time(Clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - started_).count();
  if (current_ == Phase::Data) host_data_seconds_ += seconds;
  if (!use_markers_ || host_timed(current_)) totals_[static_cast<size_t>(current_)] += seconds;
}

void StepProfiler::mark(Phase p) {
  StepMarks& step = steps_marks_[current_marks_];
  if (step.used == step.marks.size()) step.marks.emplace_back(p, device_->make_marker());
  auto& [phase, marker] = step.marks[step.used++];
  phase = p;
  marker->record();
}

void StepProfiler::begin_step(int64_t number) {
  close_ranges();  // a step not ended: its ranges must not enclose this one
  nvtx::push("step " + std::to_string(number));
  step_range_open_ = true;
  begin(Phase::Data);
}

void StepProfiler::begin(Phase p) {
  const Clock::time_point now = Clock::now();
  if (running_) add_host_time(now);
  if (use_markers_ && !host_timed(p)) mark(p);
  current_ = p;
  started_ = now;
  running_ = true;
  if (phase_range_open_) nvtx::pop();
  nvtx::push(phase_name(p));
  phase_range_open_ = true;
}

void StepProfiler::end() {
  if (phase_range_open_) nvtx::pop();
  phase_range_open_ = false;
  if (!running_) return;
  add_host_time(Clock::now());
  if (use_markers_ && !host_timed(current_)) mark(Phase::kCount);
  running_ = false;
}

void StepProfiler::cancel_step() {
  running_ = false;
  steps_marks_[current_marks_].used = 0;  // this step's markers (step_done() switched slots)
  close_ranges();
}

void StepProfiler::read(StepMarks& step) {
  for (size_t i = 0; i + 1 < step.used; ++i) {
    const Phase p = step.marks[i].first;
    if (p == Phase::kCount) continue;  // from a step's end to the next phase: not a phase
    totals_[static_cast<size_t>(p)] += step.marks[i + 1].second->ms_since(*step.marks[i].second) / 1e3;
  }
  step.used = 0;
  ++device_steps_;
}

void StepProfiler::step_done() {
  close_ranges();
  ++steps_;
  if (!use_markers_) return;
  if (pending_) read(steps_marks_[1 - current_marks_]);  // one step late: usually already passed
  pending_ = true;
  current_marks_ = 1 - current_marks_;
  steps_marks_[current_marks_].used = 0;
}

void StepProfiler::flush() {
  if (!use_markers_ || !pending_) return;
  read(steps_marks_[1 - current_marks_]);
  pending_ = false;
}

double StepProfiler::ms_per_step(Phase p) const {
  const bool on_device = use_markers_ && !host_timed(p);
  const int64_t n = on_device ? device_steps_ : steps_;
  return n > 0 ? 1e3 * totals_[static_cast<size_t>(p)] / static_cast<double>(n) : 0.0;
}

double StepProfiler::ms_per_step_since(Phase p, const Mark& since) const {
  const bool on_device = use_markers_ && !host_timed(p);
  const int64_t n = on_device ? device_steps_ - since.device_steps : steps_ - since.steps;
  const auto i = static_cast<size_t>(p);
  return n > 0 ? 1e3 * (totals_[i] - since.seconds[i]) / static_cast<double>(n) : 0.0;
}

double StepProfiler::host_data_ms_per_step() const {
  return steps_ > 0 ? 1e3 * host_data_seconds_ / static_cast<double>(steps_) : 0.0;
}

void StepProfiler::reset() {
  totals_.fill(0.0);
  host_data_seconds_ = 0.0;
  steps_ = device_steps_ = 0;
  running_ = false;
  pending_ = false;
  for (StepMarks& step : steps_marks_) step.used = 0;
  close_ranges();
}

std::string StepProfiler::summary() const {
  std::string out;
  char buf[64];
  for (size_t i = 0; i < totals_.size(); ++i) {
    const Phase p = static_cast<Phase>(i);
    if ((p == Phase::Checkpoint || p == Phase::Graph) && totals_[i] == 0.0) continue;
    std::snprintf(buf, sizeof buf, "%s%s %.2f ms", i ? " | " : "", phase_name(p), ms_per_step(p));
    out += buf;
    if (p == Phase::Data && use_markers_) {
      std::snprintf(buf, sizeof buf, " (host %.2f)", host_data_ms_per_step());
      out += buf;
    }
  }
  return out + (use_markers_ ? " per step (device time; checkpoint: host time)" : " per step");
}

}  // namespace dp
