#include "runtime/autograd/grad_mode.h"

namespace dp {

namespace {
// Per thread, as in PyTorch: a loader thread never records history by accident.
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

}  // namespace dp
