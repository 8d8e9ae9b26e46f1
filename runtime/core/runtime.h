// The explicit runtime context: owns the backends (CPU thread pool, CUDA devices) and hands
// out Devices. main() creates one and passes it (or its Devices) down; there is no global.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/device.h"

namespace dp {

class CpuBackend;

struct RuntimeOptions {
  int cpu_threads = 1;
  // CUDA devices (cuda/cuda_backend.h CudaOptions): TF32 for float32 GEMM/convolution, and
  // convolution algorithms chosen by timing (cudnn benchmark).
  bool allow_tf32 = false;
  bool cudnn_benchmark = true;
  // NOTE [ CPU memory limit ] (backend/cpu/cpu_backend.h): the CPU backend refuses an allocation
  // that would take the bytes it holds past this; unset, this machine's usable memory
  // (host_memory(): physical + swap, or the cgroup's limit when lower); 0, no limit.
  // cpu_memory_limit_source says where the figure comes from, in the error.
  std::optional<size_t> cpu_memory_limit_bytes;
  std::string cpu_memory_limit_source;
};

class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Device cpu();
  // The CUDA device with this index, created on first use; throws with a clear message when
  // the build has no CUDA backend or the machine has no such GPU.
  Device cuda(int index = 0);
  // "cpu", "cuda", "cuda:N" (as in the config's run.device).
  Device device(const std::string& spec);
  // Number of usable GPUs (0 when there is no driver or no device).
  static int cuda_device_count();

 private:
  RuntimeOptions options_;
  std::unique_ptr<CpuBackend> cpu_;
  std::vector<std::unique_ptr<Backend>> cuda_;
};

}  // namespace dp
