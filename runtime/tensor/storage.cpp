#include "runtime/tensor/storage.h"

#include "runtime/backend/backend.h"

namespace dp {

Storage::Storage(Device device, size_t nbytes)
    : device_(device), data_(nbytes ? device.backend().allocate(nbytes) : nullptr), nbytes_(nbytes) {}

Storage::Storage(Device device, void* data, size_t nbytes, std::shared_ptr<void> keep_alive)
    : device_(device), data_(data), nbytes_(nbytes), owned_(false), keep_alive_(std::move(keep_alive)) {}

Storage::~Storage() {
  if (owned_ && data_) device_.backend().deallocate(data_, nbytes_);
}

}  // namespace dp
