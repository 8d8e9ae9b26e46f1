// A Storage is one allocation on one device; tensors are views into it.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/core/device.h"

namespace dp {

class Storage {
 public:
  // Allocates `nbytes` on `device` through its backend (pooled on CUDA).
  Storage(Device device, size_t nbytes);
  // Wraps memory owned elsewhere; `keep_alive` holds the owner until the storage dies.
  Storage(Device device, void* data, size_t nbytes, std::shared_ptr<void> keep_alive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = true;
  std::shared_ptr<void> keep_alive_;
};

}  // namespace dp
