// Checking that a region of work never waits for the device (PyTorch's
// torch.cuda.set_sync_debug_mode("error"), per thread and scoped).
//
// NOTE [ Host-sync checking ]
// A training step that reads a device value on the host (Tensor::item, to_vector, a copy to the
// CPU, Backend::synchronize) stalls the host until the GPU drains its queue, and cannot be
// captured as a CUDA graph. Inside a ForbidHostSyncGuard such a read throws dp::Error naming
// what was read and the region's name. The guard counts reads of CPU tensors too: on the CPU
// "device" they cost nothing, but the same code on a GPU would wait, so a CPU test of a step
// under the guard proves the GPU step has no host read in our code (the trainer arms it with
// run.check_host_syncs). Reads a backend makes for itself on the CUDA device (its synchronize()
// and copy_to_host()) are checked as well; what CUDA libraries do inside is not.
#pragma once

namespace dp {

// Throws dp::Error when a ForbidHostSyncGuard is active on this thread; `what` says which read.
void check_host_sync_allowed(const char* what);
// Whether host reads are forbidden on this thread now.
bool host_sync_forbidden();

// RAII: forbids host reads of device values on this thread within its scope (nestable).
class ForbidHostSyncGuard {
 public:
  // `region` names the work in messages ("training step 12"); it must outlive the guard.
  explicit ForbidHostSyncGuard(const char* region);
  ~ForbidHostSyncGuard();
  ForbidHostSyncGuard(const ForbidHostSyncGuard&) = delete;
  ForbidHostSyncGuard& operator=(const ForbidHostSyncGuard&) = delete;

 private:
  const char* previous_;
};

// RAII: allows host reads again inside a forbidden region (a deliberate, documented read, e.g.
// a host-gated optimiser that reads found_inf).
class AllowHostSyncGuard {
 public:
  AllowHostSyncGuard();
  ~AllowHostSyncGuard();
  AllowHostSyncGuard(const AllowHostSyncGuard&) = delete;
  AllowHostSyncGuard& operator=(const AllowHostSyncGuard&) = delete;

 private:
  const char* previous_;
};

}  // namespace dp
