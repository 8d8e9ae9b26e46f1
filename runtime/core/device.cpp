#include "runtime/core/device.h"

#include "runtime/backend/backend.h"

namespace dp {

Backend& Device::backend() const {
  DP_CHECK(backend_ != nullptr, "use of an unset device");
  return *backend_;
}
DeviceType Device::type() const { return backend().device_type(); }
int Device::index() const { return backend().device_index(); }
std::string Device::str() const {
  if (!backend_) return "(no device)";
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index());
}

}  // namespace dp
