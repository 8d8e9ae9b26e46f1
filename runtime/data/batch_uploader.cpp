#include "runtime/data/batch_uploader.h"

#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_batch_uploader.h"
#endif

namespace dp {

namespace {

// The CPU trains on the loader's buffers directly.
class InPlaceUploader final : public BatchUploader {
 public:
  HostAllocator host_allocator() const override { return {}; }
  Batch upload(const Batch& host) override { return host; }
  void release_host_buffers() override {}
};

}  // namespace

std::unique_ptr<BatchUploader> make_batch_uploader(Device device, Device cpu) {
  if (device.is_cpu()) return std::make_unique<InPlaceUploader>();
#ifdef DPTRAIN_HAVE_CUDA
  return cuda::make_cuda_batch_uploader(device, cpu);
#else
  throw Error(detail::concat("make_batch_uploader: ", device.str(), " needs the CUDA backend, which this build lacks"));
#endif
}

}  // namespace dp
