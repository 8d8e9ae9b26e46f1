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
// Module ranges: when a tool is attached, each module's forward is a range named by its dotted
// path ("layer1.0.conv1", torch's named_modules() name, nested as the modules are), and each
// autograd node remembers the module whose forward made it, so backward's ranges read
// "conv2d [layer1.0.conv1]": a kernel in the timeline names its layer in both directions. Without
// a tool none of this runs (a module range is then one test of a flag), so it costs nothing in
// production runs; with one it costs a string per node.
// NVTX is the CUDA toolkit's header-only library (nvtx3); a build without the toolkit
// (DPTRAIN_WITH_CUDA=OFF on a machine without it) has no ranges: nvtx::enabled() says which.
#pragma once

#include <memory>
#include <string>

namespace dp::nvtx {

// True when this build emits NVTX ranges (it found the toolkit's nvtx3 headers).
bool enabled();

// Opens a range on this thread's stack; `name` is copied by the tool.
void push(const char* name);
inline void push(const std::string& name) { push(name.c_str()); }
// Closes the innermost range this thread opened.
void pop();

// True when an NVTX tool was named at start-up (NVTX_INJECTION64_PATH, which Nsight Systems and
// Nsight Compute set and through which NVTX loads them): then ranges carry the details that cost
// a string each (module ranges, nodes' module names). Read once.
bool tool_attached();

// A range for a scope.
class ScopedRange {
 public:
  explicit ScopedRange(const char* name) { push(name); }
  explicit ScopedRange(const std::string& name) { push(name); }
  // "name [module]", or `name` alone when `module` is null.
  ScopedRange(const std::string& name, const std::shared_ptr<const std::string>& module);
  ~ScopedRange() { pop(); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;
};

// The dotted name of the module whose forward is running on this thread (the innermost one), or
// null: outside every module's forward, for a module without a name, or with no tool attached.
// Autograd nodes keep it (Node::module()).
const std::shared_ptr<const std::string>& current_module();

// A module's forward as a range named `module` (nn::Module::forward_range), which is the current
// module on this thread until the range ends. Nothing at all when no tool is attached or `module`
// is null.
class ModuleRange {
 public:
  explicit ModuleRange(const std::shared_ptr<const std::string>& module);
  ~ModuleRange();
  ModuleRange(const ModuleRange&) = delete;
  ModuleRange& operator=(const ModuleRange&) = delete;

 private:
  const std::shared_ptr<const std::string>* outer_ = nullptr;  // the module current before this one
  bool open_ = false;
};

}  // namespace dp::nvtx
