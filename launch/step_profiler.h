// Splits each training step's time into phases: waiting for data, forward, backward, exposed
// communication, optimiser, and writing checkpoints (amortised over the steps; what's left is
// "other": logging, metrics).
//
// NOTE [ Step timing on a GPU ]
// On the CPU every phase is host wall-clock. On a GPU the host only queues kernels, so host time
// around a phase would measure queuing, not work: there the phases are timed by markers (CUDA
// events) recorded on the device's stream at each phase boundary, and read one step late — at
// the end of step n the markers of step n−1 are read, by which time the device has usually
// passed them, so reading costs no wait and adds no synchronisation inside a step.
// The data phase too: its markers bracket the host's fetching of the batch (the loader's wait and
// the upload's queueing) and the device's wait for the batch's copy. While the host runs ahead of
// the device, the device meets both markers back to back and the data phase costs the step
// nothing, however long the host took; when the host falls behind (a slow loader), the device
// idles from the first marker to the second and that idle time is the data phase — the data
// time the step pays, as "comm" is the communication time it pays (exposed). The host's own time
// in the phase is kept beside it (host_data_ms_per_step: "data 0.00 ms (host 0.03)"), since it
// shows how close the loader is to becoming exposed. Checkpoints stay host time: writing one
// blocks the host, and whether the device had drained by then is not what its cost means.
// flush() reads the last step's markers (waiting for the device) before a summary.
// Each step and each phase is also an NVTX range ("step 12" around "data", "forward", ...) for
// Nsight Systems (NOTE [ NVTX ranges ] in runtime/core/nvtx.h).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/backend.h"

namespace dp {

// Graph: a step replayed as one CUDA graph (run.cuda_graphs), whose forward, backward, comm and
// optimiser cannot be told apart (NOTE [ CUDA graphs ] in launch/graphed_step.h).
enum class Phase : uint8_t { Data, Forward, Backward, Comm, Optimizer, Graph, Checkpoint, kCount };
const char* phase_name(Phase p);
// Phases timed by the host's clock even on a GPU (NOTE [ Step timing on a GPU ]).
inline bool host_timed(Phase p) { return p == Phase::Checkpoint; }

class StepProfiler {
 public:
  using Clock = std::chrono::steady_clock;

  // `device`: the backend the model trains on; its markers time the model phases when it has
  // them (a GPU), else everything is host time. Null: host time.
  explicit StepProfiler(Backend* device = nullptr);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Starts training step `number` (its NVTX range "step <number>") with its data phase.
  void begin_step(int64_t number);
  // Starts timing phase p (ending the phase that was running, if any).
  void begin(Phase p);
  // Ends the running phase.
  void end();
  // Marks a step boundary (counts steps; on a GPU reads the previous step's markers); ends the
  // step begun by begin_step.
  void step_done();
  // Drops the running phase uncounted and the step begun by begin_step: the loader had no batch.
  void cancel_step();
  // Reads the markers not read yet (waits for the device to pass them).
  void flush();

  // Average milliseconds per step of phase p over the steps timed since reset(): what the step
  // paid for it (on a GPU: device time, NOTE [ Step timing on a GPU ]).
  double ms_per_step(Phase p) const;
  // Average milliseconds per step the host spent in the data phase (on the CPU: ms_per_step(Data)).
  double host_data_ms_per_step() const;
  int64_t steps() const { return steps_; }
  // What has been timed since reset(): a mark to measure a window of steps from (the metrics'
  // step records give each reporting window's phases beside the epoch's).
  struct Mark {
    std::array<double, static_cast<size_t>(Phase::kCount)> seconds{};
    int64_t steps = 0, device_steps = 0;
  };
  Mark mark_now() const { return {totals_, steps_, device_steps_}; }
  // Average milliseconds per step of phase p over the steps timed since `since` (0 when none).
  double ms_per_step_since(Phase p, const Mark& since) const;
  void reset();
  // "data 0.12 ms | forward 3.10 ms | ... per step" (checkpoint only when some were written; on a
  // GPU the data phase shows the host's time beside it: "data 0.00 ms (host 0.03)").
  std::string summary() const;
  // True when the model phases are timed on the device's clock.
  bool device_timed() const { return use_markers_; }

 private:
  // One step's device markers: the phase each one starts (kCount: the step's end).
  struct StepMarks {
    std::vector<std::pair<Phase, std::unique_ptr<DeviceMarker>>> marks;
    size_t used = 0;
  };
  void mark(Phase p);
  void read(StepMarks& step);
  void add_host_time(Clock::time_point now);
  void close_ranges();

  Backend* device_ = nullptr;  // null: host time only
  bool use_markers_ = false;
  std::array<double, static_cast<size_t>(Phase::kCount)> totals_{};  // seconds
  double host_data_seconds_ = 0.0;
  int64_t steps_ = 0;
  int64_t device_steps_ = 0;  // steps whose markers have been read
  bool running_ = false;
  Phase current_ = Phase::Data;
  Clock::time_point started_;
  std::array<StepMarks, 2> steps_marks_;
  int current_marks_ = 0;
  bool pending_ = false;  // steps_marks_[1 - current_marks_] holds a step not read yet
  // NVTX ranges open on the thread that drives this profiler: the step's, then the phase's.
  bool step_range_open_ = false;
  bool phase_range_open_ = false;
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
