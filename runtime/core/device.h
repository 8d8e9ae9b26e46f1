// A Device is a handle to the backend that owns a memory space (the CPU, or one CUDA GPU).
// Devices come from a Runtime (runtime/core/runtime.h) and are passed explicitly to everything
// that creates tensors: there is no global "current device".
#pragma once

#include <cstdint>
#include <string>

namespace dp {

enum class DeviceType : uint8_t { CPU, CUDA };

class Backend;

class Device {
 public:
  Device() = default;
  explicit Device(Backend* backend) : backend_(backend) {}

  DeviceType type() const;
  int index() const;
  bool is_cpu() const { return type() == DeviceType::CPU; }
  bool is_cuda() const { return type() == DeviceType::CUDA; }
  bool valid() const { return backend_ != nullptr; }
  Backend& backend() const;
  std::string str() const;  // "cpu", "cuda:0"

  friend bool operator==(const Device& a, const Device& b) { return a.backend_ == b.backend_; }

 private:
  Backend* backend_ = nullptr;
};

}  // namespace dp
