#include "runtime/core/nvtx.h"

#include <cstdlib>

#if DPTRAIN_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace dp::nvtx {

#if DPTRAIN_HAVE_NVTX
bool enabled() { return true; }
void push(const char* name) { nvtxRangePushA(name); }
void pop() { nvtxRangePop(); }
bool tool_attached() {
  static const bool attached = [] {
    const char* path = std::getenv("NVTX_INJECTION64_PATH");
    return path != nullptr && *path != '\0';
  }();
  return attached;
}
#else
bool enabled() { return false; }
void push(const char*) {}
void pop() {}
bool tool_attached() { return false; }
#endif

ScopedRange::ScopedRange(const std::string& name, const std::shared_ptr<const std::string>& module) {
  if (module) push(name + " [" + *module + "]");
  else push(name);
}

namespace {
const std::shared_ptr<const std::string> no_module;
// Points at the running module's name (owned by the module, alive while its forward runs).
thread_local const std::shared_ptr<const std::string>* running_module = &no_module;
}  // namespace

const std::shared_ptr<const std::string>& current_module() { return *running_module; }

ModuleRange::ModuleRange(const std::shared_ptr<const std::string>& module) {
  if (!module || !tool_attached()) return;
  push(*module);
  outer_ = running_module;
  running_module = &module;
  open_ = true;
}

ModuleRange::~ModuleRange() {
  if (!open_) return;
  running_module = outer_;
  pop();
}

}  // namespace dp::nvtx
