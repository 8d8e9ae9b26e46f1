#include "runtime/core/host_sync.h"

#include "runtime/core/error.h"

namespace dp {

namespace {
// The innermost forbidding region's name; null when reads are allowed.
thread_local const char* forbidding_region = nullptr;
}  // namespace

bool host_sync_forbidden() { return forbidding_region != nullptr; }

void check_host_sync_allowed(const char* what) {
  if (forbidding_region == nullptr) return;
  throw Error(detail::concat(what, " reads a device value on the host inside ", forbidding_region,
                             ", where host syncs are forbidden (NOTE [ Host-sync checking ] in "
                             "runtime/core/host_sync.h)"));
}

ForbidHostSyncGuard::ForbidHostSyncGuard(const char* region) : previous_(forbidding_region) {
  forbidding_region = region != nullptr ? region : "a forbidden region";
}
ForbidHostSyncGuard::~ForbidHostSyncGuard() { forbidding_region = previous_; }

AllowHostSyncGuard::AllowHostSyncGuard() : previous_(forbidding_region) { forbidding_region = nullptr; }
AllowHostSyncGuard::~AllowHostSyncGuard() { forbidding_region = previous_; }

}  // namespace dp
