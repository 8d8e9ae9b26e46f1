#include "runtime/core/nvtx.h"

#if DPTRAIN_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace dp::nvtx {

#if DPTRAIN_HAVE_NVTX
bool enabled() { return true; }
void push(const char* name) { nvtxRangePushA(name); }
void pop() { nvtxRangePop(); }
#else
bool enabled() { return false; }
void push(const char*) {}
void pop() {}
#endif

}  // namespace dp::nvtx
