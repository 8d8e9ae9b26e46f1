// Named ranges for Nsight Systems and other NVTX tools (`nsys profile --trace=cuda,nvtx,mpi ...`).
//
// NOTE [ NVTX ranges ]
// dptrain marks its timeline with NVTX ranges, always on: every training step ("step 12"), and
// inside it the step profiler's phases (data, forward, backward, comm, optimizer, graph — the
// same split as the step-time line); inside backward, each autograd node by its op's name
// ("conv2d", "batch_norm_add_relu", "AccumulateGrad"); checkpoints and evaluations between
// steps, and the final weights' save; and on the MPI backend's communication thread, each
// collective ("all_reduce(sum, float32 x 2098432, tag 3) #41"). A profiler then places the GPU's
// kernels under the op, phase and step that queued them, and per-rank timelines of a multi-node
// run show which phase a slow rank spends its time in.
// Without a tool attached a range costs a few nanoseconds (bench/nvtx_bench): NVTX's first call
// looks for an injection library (NVTX_INJECTION64_PATH, which nsys sets) and, finding none,
// leaves every call an empty function. (A collective's label is still formatted: a few
// hundred nanoseconds beside a collective's microseconds or more.) With a tool attached each range
// costs what the tool takes to record it (hundreds of nanoseconds), about one per autograd node
// a step. Ranges nest per thread (push/pop), so every push here has its pop on the same thread,
// also when an exception unwinds (ScopedRange, and StepProfiler's own bookkeeping).
// NVTX is the CUDA toolkit's header-only library (nvtx3); a build without the toolkit
// (DPTRAIN_WITH_CUDA=OFF on a machine without it) has no ranges: nvtx::enabled() says which.
#pragma once

#include <string>

namespace dp::nvtx {

// True when this build emits NVTX ranges (it found the toolkit's nvtx3 headers).
bool enabled();

// Opens a range on this thread's stack; `name` is copied by the tool.
void push(const char* name);
inline void push(const std::string& name) { push(name.c_str()); }
// Closes the innermost range this thread opened.
void pop();

// A range for a scope.
class ScopedRange {
 public:
  explicit ScopedRange(const char* name) { push(name); }
  explicit ScopedRange(const std::string& name) { push(name); }
  ~ScopedRange() { pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
};

}  // namespace dp::nvtx
