#include "runtime/core/runtime.h"

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/host_memory.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {

Runtime::Runtime(const RuntimeOptions& options)
    : options_(options), cpu_(std::make_unique<CpuBackend>(options.cpu_threads)) {
  if (options.cpu_memory_limit_bytes) {
    cpu_->set_memory_limit(*options.cpu_memory_limit_bytes, options.cpu_memory_limit_source);
  } else {
    const HostMemory memory = host_memory();
    cpu_->set_memory_limit(automatic_cpu_memory_limit(memory, 1), automatic_cpu_memory_limit_source(memory, 1));
  }
}
Runtime::~Runtime() = default;

Device Runtime::cpu() { return Device(cpu_.get()); }

int Runtime::cuda_device_count() {
#ifdef DPTRAIN_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

Device Runtime::cuda(int index) {
#ifdef DPTRAIN_HAVE_CUDA
  const int count = cuda_device_count();
  DP_CHECK(index >= 0 && index < count, "device cuda:", index, " requested but ",
           count == 0 ? std::string("no CUDA GPU is visible (no driver or no device)")
                      : std::to_string(count) + " GPU(s) are visible");
  if (cuda_.size() <= static_cast<size_t>(index)) cuda_.resize(index + 1);
  if (!cuda_[index]) {
    cuda::CudaOptions o;
    o.allow_tf32 = options_.allow_tf32;
    o.cudnn_benchmark = options_.cudnn_benchmark;
    cuda_[index] = std::make_unique<cuda::CudaBackend>(index, o);
  }
  return Device(cuda_[index].get());
#else
  throw Error(detail::concat("device cuda:", index,
                             " requested but dptrain was built without CUDA (configure with the CUDA "
                             "toolkit and -DDPTRAIN_WITH_CUDA=ON)"));
#endif
}

Device Runtime::device(const std::string& spec) {
  if (spec == "cpu") return cpu();
  if (spec == "cuda") return cuda(0);
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string idx = spec.substr(5);
    DP_CHECK(!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos,
             "device '", spec, "': expected cpu, cuda or cuda:N");
    return cuda(std::stoi(idx));
  }
  throw Error(detail::concat("device '", spec, "': expected cpu, cuda or cuda:N"));
}

}  // namespace dp
