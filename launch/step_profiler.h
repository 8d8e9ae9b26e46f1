// Splits each training step's wall time into phases: waiting for data, forward, backward,
// exposed communication and optimiser (what's left is "other": logging, metrics). Times are
// host wall-clock around each phase; on a GPU the trainer synchronises only where the phase
// boundary already requires it, so profiling adds no extra CPU↔GPU sync.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace dp {

enum class Phase : uint8_t { Data, Forward, Backward, Comm, Optimizer, kCount };
const char* phase_name(Phase p);

class StepProfiler {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts timing phase p (ending the phase that was running, if any).
  void begin(Phase p);
  // Ends the running phase.
  void end();
  // Marks a step boundary (counts steps for the averages).
  void step_done() { ++steps_; }

  double seconds(Phase p) const { return totals_[static_cast<size_t>(p)]; }
  double total_seconds() const;
  int64_t steps() const { return steps_; }
  void reset();
  // "data 3% | fwd 31% | bwd 55% | comm 0% | optim 8%" with ms per step.
  std::string summary() const;

 private:
  std::array<double, static_cast<size_t>(Phase::kCount)> totals_{};
  int64_t steps_ = 0;
  bool running_ = false;
  Phase current_ = Phase::Data;
  Clock::time_point started_;
};

// RAII phase scope.
class PhaseScope {
 public:
  PhaseScope(StepProfiler& profiler, Phase p) : profiler_(profiler) { profiler_.begin(p); }
  ~PhaseScope() { profiler_.end(); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  StepProfiler& profiler_;
};

}  // namespace dp
