// Batches from pinned host memory to two device slots on a copy stream (NOTE [ Batch upload ]).
#include "runtime/backend/cuda/cuda_batch_uploader.h"

#include <cuda_runtime_api.h>

#include <array>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"

namespace dp::cuda {

namespace {

// A contiguous CPU tensor in page-locked memory, which the copy engine reads asynchronously.
Tensor pinned_tensor(const Shape& shape, DType dtype, Device cpu) {
  const size_t nbytes = static_cast<size_t>(numel_of(shape)) * element_size(dtype);
  auto buffer = std::make_shared<PinnedHostBuffer>(nbytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(cpu, buffer->data(), nbytes, buffer);
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

class CudaBatchUploader final : public BatchUploader {
 public:
  CudaBatchUploader(Device device, Device cpu)
      : device_(device), cpu_(cpu), gpu_(static_cast<CudaBackend&>(device.backend())), index_(device.index()) {
    DP_CUDA_CHECK(index_, cudaSetDevice(index_));
    try {
      DP_CUDA_CHECK(index_, cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      DP_CUDA_CHECK(index_, cudaEventCreateWithFlags(&copy_done_, cudaEventDisableTiming));
      for (Slot& slot : slots_) DP_CUDA_CHECK(index_, cudaEventCreateWithFlags(&slot.compute_done, cudaEventDisableTiming));
    } catch (...) {
      release();
      throw;
    }
  }
  ~CudaBatchUploader() override { release(); }

  HostAllocator host_allocator() const override {
    return [cpu = cpu_](const Shape& shape, DType dtype) { return pinned_tensor(shape, dtype, cpu); };
  }

  Batch upload(const Batch& host) override {
    for (const auto& [name, t] : host.tensors())
      DP_CHECK(t.device().is_cpu() && t.is_contiguous(), "batch upload: expected contiguous CPU tensors, got '", name,
               "' ", t.str());
    DP_CUDA_CHECK(index_, cudaSetDevice(index_));
    cudaStream_t compute = gpu_.stream();
    // Everything queued so far on the compute stream includes the step that trained on the
    // previous upload's slot: mark that point for when the slot is rewritten.
    if (last_slot_ >= 0) {
      DP_CUDA_CHECK(index_, cudaEventRecord(slots_[last_slot_].compute_done, compute));
      slots_[last_slot_].marked = true;
    }
    const int k = last_slot_ < 0 ? 0 : 1 - last_slot_;
    Slot& slot = slots_[k];
    if (slot.marked) DP_CUDA_CHECK(index_, cudaStreamWaitEvent(copy_stream_, slot.compute_done, 0));
    if (!fits(slot.buffers, host)) {
      // New device buffers come from the pool on the compute stream: order the copy stream
      // after their allocation. (Old buffers are freed on the compute stream, which already
      // waited for every copy into them.)
      slot.buffers = Batch{};
      for (const auto& [name, t] : host.tensors()) slot.buffers.set(name, Tensor::empty(t.shape(), t.dtype(), device_));
      DP_CUDA_CHECK(index_, cudaEventRecord(copy_done_, compute));
      DP_CUDA_CHECK(index_, cudaStreamWaitEvent(copy_stream_, copy_done_, 0));
    }
    // The batch as a view of the beginning of each buffer, in its own shape.
    Batch out;
    for (size_t i = 0; i < host.tensors().size(); ++i) {
      const auto& [name, want] = host.tensors()[i];
      const Tensor& have = slot.buffers.tensors()[i].second;
      out.set(name, have.shape() == want.shape() ? have : have.flatten().narrow(0, 0, want.numel()).view(want.shape()));
    }
    for (size_t i = 0; i < host.tensors().size(); ++i) {
      const Tensor& src = host.tensors()[i].second;
      const Tensor& dst = out.tensors()[i].second;
      DP_CUDA_CHECK(index_,
                    cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyHostToDevice, copy_stream_),
                    "batch upload of '", host.tensors()[i].first, "' ", src.str());
    }
    DP_CUDA_CHECK(index_, cudaEventRecord(copy_done_, copy_stream_));
    DP_CUDA_CHECK(index_, cudaStreamWaitEvent(compute, copy_done_, 0));
    out.mark_rewritten();  // a stale saved copy of an earlier batch in this slot is caught
    last_slot_ = k;
    return out;
  }

  void release_host_buffers() override {
    if (last_slot_ >= 0) DP_CUDA_CHECK(index_, cudaEventSynchronize(copy_done_), "waiting for a batch upload");
  }

 private:
  struct Slot {
    Batch buffers;
    cudaEvent_t compute_done = nullptr;  // the compute stream has finished with this slot
    bool marked = false;                 // compute_done has been recorded at least once
  };

  // The slot's buffers hold `host`: the same names and dtypes in the same order, each with at
  // least as many elements. A batch is a view of the beginning of each buffer in its own shape,
  // so smaller batches (the last of an epoch) and batches of another shape (token batching: rows
  // and padded length change every step) reuse the buffers.
  static bool fits(const Batch& buffers, const Batch& host) {
    if (buffers.tensors().size() != host.tensors().size()) return false;
    for (size_t i = 0; i < host.tensors().size(); ++i) {
      const auto& [have_name, have_t] = buffers.tensors()[i];
      const auto& [want_name, want_t] = host.tensors()[i];
      if (have_name != want_name || have_t.dtype() != want_t.dtype() || have_t.numel() < want_t.numel()) return false;
    }
    return true;
  }

  void release() noexcept {
    if (copy_stream_) DP_CUDA_REPORT(index_, cudaStreamSynchronize(copy_stream_));
    for (Slot& slot : slots_)
      if (slot.compute_done) DP_CUDA_REPORT(index_, cudaEventDestroy(slot.compute_done));
    if (copy_done_) DP_CUDA_REPORT(index_, cudaEventDestroy(copy_done_));
    if (copy_stream_) DP_CUDA_REPORT(index_, cudaStreamDestroy(copy_stream_));
    copy_stream_ = nullptr;
    copy_done_ = nullptr;
  }

  Device device_, cpu_;
  CudaBackend& gpu_;
  int index_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copy_done_ = nullptr;  // the last upload's copies have finished
  std::array<Slot, 2> slots_{};
  int last_slot_ = -1;
};

}  // namespace

std::unique_ptr<BatchUploader> make_cuda_batch_uploader(Device device, Device cpu) {
  DP_CHECK(device.is_cuda(), "make_cuda_batch_uploader: ", device.str(), " is not a CUDA device");
  return std::make_unique<CudaBatchUploader>(device, cpu);
}

}  // namespace dp::cuda
