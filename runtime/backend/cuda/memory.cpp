// CUDA memory (stream-ordered pool), host/device copies, pinned host buffers, events, and the
// front-ends of the copy/fill/arange/random kernels (memory.cu).
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <utility>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/memory_kernels.h"
#include "runtime/backend/cuda/strided_shape.h"
#include "runtime/core/host_sync.h"

namespace dp::cuda {

namespace {

// True for page-locked (cudaHostAlloc'd or registered) host memory.
bool is_pinned(const void* host_ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host_ptr) != cudaSuccess) {
    (void)cudaGetLastError();  // unknown pointer: ordinary pageable memory
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

// ---- Pinned host memory and events ------------------------------------------------------------

PinnedHostBuffer::PinnedHostBuffer(size_t nbytes) : size_(nbytes) {
  if (nbytes == 0) return;
  DP_CUDA_CHECK(-1, cudaHostAlloc(&data_, nbytes, cudaHostAllocPortable), "pinned host memory, requested ",
                format_bytes(nbytes));
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (data_) DP_CUDA_REPORT(-1, cudaFreeHost(data_));
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    PinnedHostBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_) DP_CUDA_REPORT(device_, cudaEventDestroy(event_));
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    CudaEvent old(std::move(*this));
    device_ = other.device_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

bool CudaEvent::ready() const {
  if (!event_) return true;
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  if (status != cudaSuccess) throw_cuda_error("cudaEventQuery(event_)", status, device_, "");
  return true;
}

void CudaEvent::synchronize() const {
  if (event_) DP_CUDA_CHECK(device_, cudaEventSynchronize(event_));
}

CudaEvent CudaBackend::record_event() {
  activate();
  cudaEvent_t event = nullptr;
  DP_CUDA_CHECK(device_, cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CudaEvent owned(device_, event);
  DP_CUDA_CHECK(device_, cudaEventRecord(event, stream_));
  return owned;
}

namespace {

// A timing event on a backend's stream.
class CudaMarker final : public DeviceMarker {
 public:
  CudaMarker(int device, cudaStream_t stream) : device_(device), stream_(stream) {
    DP_CUDA_CHECK(device_, cudaEventCreate(&event_));  // with timing
  }
  ~CudaMarker() override { DP_CUDA_REPORT(device_, cudaEventDestroy(event_)); }
  CudaMarker(const CudaMarker&) = delete;
  CudaMarker& operator=(const CudaMarker&) = delete;

  void record() override {
    DP_CUDA_CHECK(device_, cudaEventRecord(event_, stream_));
    recorded_ = true;
  }
  double ms_since(const DeviceMarker& earlier) const override {
    const auto& from = dynamic_cast<const CudaMarker&>(earlier);
    DP_CHECK(recorded_ && from.recorded_, "DeviceMarker::ms_since: both markers must have been recorded");
    DP_CUDA_CHECK(device_, cudaEventSynchronize(event_));
    float ms = 0;
    DP_CUDA_CHECK(device_, cudaEventElapsedTime(&ms, from.event_, event_));
    return ms;
  }

 private:
  int device_;
  cudaStream_t stream_;
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

std::unique_ptr<DeviceMarker> CudaBackend::make_marker() {
  activate();
  return std::make_unique<CudaMarker>(device_, stream_);
}

// ---- Device memory and copies -----------------------------------------------------------------

void* CudaBackend::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  activate();
  if (capturing_) return allocate_for_capture(nbytes);  // NOTE [ Graph memory ]
  void* ptr = nullptr;
  DP_CUDA_CHECK(device_, cudaMallocAsync(&ptr, nbytes, stream_), "requested ", format_bytes(nbytes),
                "; pool: ", format_bytes(pool_stats().used_bytes), " in use, ",
                format_bytes(pool_stats().reserved_bytes), " reserved");
  return ptr;
}

void CudaBackend::deallocate(void* ptr, size_t) {
  // Called from Storage's destructor: reports rather than throws.
  if (!ptr || free_graph_block(ptr)) return;
  DP_CUDA_REPORT(device_, cudaFreeAsync(ptr, stream_));
}

PoolStats CudaBackend::pool_stats() const {
  PoolStats stats;
  DP_CUDA_CHECK(device_, cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &stats.used_bytes));
  DP_CUDA_CHECK(device_, cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &stats.reserved_bytes));
  return stats;
}

void CudaBackend::copy_from_host(void* dst, const void* host_src, size_t nbytes) {
  if (nbytes == 0) return;
  DP_CHECK(!capturing_, "a host → device copy of ", format_bytes(nbytes), " inside a CUDA graph capture: every replay ",
           "would copy the same host bytes again; create the tensor before the captured step, or on the device");
  activate();
  DP_CUDA_CHECK(device_, cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, stream_),
                format_bytes(nbytes), " host → device");
  // From pinned memory the copy really is asynchronous; the contract lets the caller free the
  // source on return, so wait (copy_from_pinned_async is the asynchronous path).
  if (is_pinned(host_src)) DP_CUDA_CHECK(device_, cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  check_host_sync_allowed("a CUDA device → host copy");
  activate();
  DP_CUDA_CHECK(device_, cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, stream_),
                format_bytes(nbytes), " device → host");
  DP_CUDA_CHECK(device_, cudaStreamSynchronize(stream_), "waiting for the work queued before a device → host copy");
  raise_device_errors();
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  activate();
  DP_CUDA_CHECK(device_, cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream_),
                format_bytes(nbytes), " device → device");
}

CudaEvent CudaBackend::copy_from_pinned_async(void* dst, const PinnedHostBuffer& src, size_t src_offset,
                                              size_t nbytes) {
  DP_CHECK(src_offset <= src.size() && nbytes <= src.size() - src_offset, "copy_from_pinned_async: bytes [",
           src_offset, ", ", src_offset + nbytes, ") lie outside the pinned buffer of ", src.size(), " bytes");
  activate();
  DP_CUDA_CHECK(device_,
                cudaMemcpyAsync(dst, static_cast<const char*>(src.data()) + src_offset, nbytes,
                                cudaMemcpyHostToDevice, stream_),
                format_bytes(nbytes), " pinned host → device");
  return record_event();
}

void CudaBackend::synchronize() {
  check_host_sync_allowed("CUDA synchronize()");
  activate();
  DP_CUDA_CHECK(device_, cudaStreamSynchronize(stream_));
  raise_device_errors();
}

void CudaBackend::profiler_start() {
  activate();
  DP_CUDA_CHECK(device_, cudaProfilerStart(), "starting the profiler's capture");
}

void CudaBackend::profiler_stop() {
  activate();
  DP_CUDA_CHECK(device_, cudaProfilerStop(), "stopping the profiler's capture");
}

// ---- Copies, casts, fills, random -------------------------------------------------------------


void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  DP_CHECK(src.shape() == dst.shape(), "copy: shape mismatch ", src.str(), " → ", dst.str());
  check_operand("copy", src);
  check_operand("copy", dst);
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    copy_on_device(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  activate();
  const StridedShape<2> shape = make_strided_shape<2>("copy", dst.shape(), {&dst.strides(), &src.strides()});
  DP_CUDA_CHECK(device_,
                launch_copy(src.raw_data(), src.dtype(), dst.raw_data(), dst.dtype(), shape, src.numel(), stream_),
                "copy ", src.str(), " → ", dst.str());
}

void CudaBackend::fill(const Tensor& dst, double value) {
  check_operand("fill", dst);
  if (dst.numel() == 0) return;
  activate();
  const StridedShape<1> shape = make_strided_shape<1>("fill", dst.shape(), {&dst.strides()});
  DP_CUDA_CHECK(device_, launch_fill(dst.raw_data(), dst.dtype(), value, shape, dst.numel(), stream_), "fill ",
                dst.str());
}

void CudaBackend::arange(const Tensor& dst, double start, double step) {
  DP_ASSERT(dst.is_contiguous());
  check_operand("arange", dst);
  activate();
  DP_CUDA_CHECK(device_, launch_arange(dst.raw_data(), dst.dtype(), dst.numel(), start, step, stream_), "arange ",
                dst.str());
}

void CudaBackend::random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed, uint64_t offset,
                         const Tensor& offset_base) {
  DP_ASSERT(dst.is_contiguous());
  check_floating("random", dst);
  check_operand("random", dst);
  if (offset_base.defined()) {
    check_operand("random", offset_base);
    DP_CHECK(offset_base.dtype() == kInt64 && offset_base.numel() == 1, "random: offset_base must be one int64, got ",
             offset_base.str());
  }
  // A captured draw without a device base would repeat at every replay (NOTE [ Random numbers in
  // CUDA graphs ]).
  DP_CHECK(!capturing_ || offset_base.defined(), "random numbers (", dst.str(), ") inside a CUDA graph capture with ",
           "counters fixed at capture: every replay would draw the same ones (e.g. the same dropout mask each step); ",
           "draw from a Generator in relative mode (Generator::begin_relative)");
  const Distribution kind = dist == RandomDist::Uniform ? Distribution::Uniform
                            : dist == RandomDist::Normal ? Distribution::Normal
                                                         : Distribution::Bernoulli;
  activate();
  const auto* base = offset_base.defined() ? static_cast<const int64_t*>(offset_base.raw_data()) : nullptr;
  DP_CUDA_CHECK(device_,
                launch_random(dst.raw_data(), dst.dtype(), dst.numel(), kind, a, b, seed, offset, base, stream_),
                "random ", dst.str());
}

}  // namespace dp::cuda
