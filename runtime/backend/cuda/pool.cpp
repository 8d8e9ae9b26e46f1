// Pooling front-ends (kernels in pool.cu), NCHW-contiguous or channels-last.
//
// Our own kernels rather than cuDNN's pooling: cuDNN's max pooling returns no indices (its
// backward re-reads x and y to find the maximum again), while our interface saves int32 indices
// in the forward and scatters dy through them in the backward — PyTorch's own CUDA design for
// max_pool2d_with_indices. Owning the kernels also gives the CPU backend's exact tie-breaking
// and NaN propagation, its padding and count_include_pad divisors, and PyTorch's adaptive
// windows, and keeps every backward deterministic (no atomics; see pool.cu).
#include <climits>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/pool_kernels.h"

namespace dp::cuda {

namespace {

// x [N, C, H, W] (input side), y [N, C, OH, OW] (output side), and the max-pool indices (like y)
// when given: one memory format for all (NOTE [ Channels-last ]).
PoolGeometry geometry_of(const char* op, const Tensor& x, const Tensor& y, const Tensor& indices = Tensor()) {
  DP_CHECK(x.dim() == 4 && y.dim() == 4 && x.size(0) == y.size(0) && x.size(1) == y.size(1), op,
           ": expected 4-D input and output [N, C, H, W] with the same N and C, got ", x.str(), " and ", y.str());
  PoolGeometry g;
  g.channels_last = (indices.defined() ? common_memory_format(op, {&x, &y, &indices})
                                       : common_memory_format(op, {&x, &y})) == MemoryFormat::ChannelsLast;
  g.planes = x.size(0) * x.size(1);
  g.channels = x.size(1);
  g.H = x.size(2);
  g.W = x.size(3);
  g.OH = y.size(2);
  g.OW = y.size(3);
  return g;
}

void set_window(PoolGeometry& g, const Pool2dParams& p) {
  g.kernel_h = p.kernel_h;
  g.kernel_w = p.kernel_w;
  g.stride_h = p.stride_h;
  g.stride_w = p.stride_w;
  g.pad_h = p.pad_h;
  g.pad_w = p.pad_w;
  g.count_include_pad = p.count_include_pad;
}

void check_window(const char* op, const Pool2dParams& p) {
  DP_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0,
           op, ": kernel and stride must be ≥ 1 and padding ≥ 0, got kernel ", p.kernel_h, "x", p.kernel_w,
           ", stride ", p.stride_h, "x", p.stride_w, ", padding ", p.pad_h, "x", p.pad_w);
}

}  // namespace

// x [N, C, H, W] → y [N, C, OH, OW], indices int32 [N, C, OH, OW]
void CudaBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p) {
  const char* op = "max_pool2d";
  for (const Tensor* t : {&x, &y, &indices}) check_operand(op, *t);
  check_supported(Kernel::MaxPool2dForward, x.dtype());
  DP_CHECK(y.dtype() == x.dtype() && indices.dtype() == kInt32 && indices.shape() == y.shape(), op,
           ": expected y in the input's dtype and int32 indices of y's shape, got x ", x.str(), ", y ", y.str(),
           ", indices ", indices.str());
  check_window(op, p);
  PoolGeometry g = geometry_of(op, x, y, indices);
  set_window(g, p);
  DP_CHECK(g.H * g.W <= INT32_MAX, op, ": a plane of ", g.H, "x", g.W, " elements is too large for int32 indices (",
           x.str(), ")");
  if (y.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_max_pool2d_forward(x.raw_data(), y.raw_data(), indices.data<int32_t>(), x.dtype(), g, stream_),
                op, " ", x.str(), " → ", y.str());
}

// dy [N, C, OH, OW], indices int32 [N, C, OH, OW] → dx [N, C, H, W] (overwritten); the kernel
// gathers through the forward's window p.
void CudaBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                      const Pool2dParams& p) {
  const char* op = "max_pool2d_backward";
  for (const Tensor* t : {&dy, &indices, &dx}) check_operand(op, *t);
  check_supported(Kernel::MaxPool2dBackward, dy.dtype());
  DP_CHECK(dx.dtype() == dy.dtype() && indices.dtype() == kInt32 && indices.shape() == dy.shape(), op,
           ": expected dx in dy's dtype and int32 indices of dy's shape, got dy ", dy.str(), ", indices ",
           indices.str(), ", dx ", dx.str());
  check_window(op, p);
  PoolGeometry g = geometry_of(op, dx, dy, indices);
  set_window(g, p);
  DP_CHECK(g.H * g.W <= INT32_MAX, op, ": a plane of ", g.H, "x", g.W, " elements is too large for int32 indices (",
           dx.str(), ")");
  if (dx.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_max_pool2d_backward(dy.raw_data(), indices.data<int32_t>(), dx.raw_data(), dy.dtype(), g,
                                           stream_),
                op, " ", dy.str(), " → ", dx.str());
}

// x [N, C, H, W] → y [N, C, OH, OW]
void CudaBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  const char* op = "avg_pool2d";
  for (const Tensor* t : {&x, &y}) check_operand(op, *t);
  check_supported(Kernel::AvgPool2dForward, x.dtype());
  DP_CHECK(y.dtype() == x.dtype(), op, ": input ", x.str(), " and output ", y.str(), " have different dtypes");
  check_window(op, p);
  PoolGeometry g = geometry_of(op, x, y);
  set_window(g, p);
  if (y.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_, launch_avg_pool2d_forward(x.raw_data(), y.raw_data(), x.dtype(), g, stream_), op, " ",
                x.str(), " → ", y.str());
}

// dy [N, C, OH, OW] → dx [N, C, H, W] (overwritten)
void CudaBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  for (const Tensor* t : {&dy, &dx}) check_operand(op, *t);
  check_supported(Kernel::AvgPool2dBackward, dy.dtype());
  DP_CHECK(dx.dtype() == dy.dtype(), op, ": dy ", dy.str(), " and dx ", dx.str(), " have different dtypes");
  check_window(op, p);
  PoolGeometry g = geometry_of(op, dx, dy);
  set_window(g, p);
  if (dx.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_, launch_avg_pool2d_backward(dy.raw_data(), dx.raw_data(), dy.dtype(), g, stream_), op, " ",
                dy.str(), " → ", dx.str());
}

// x [N, C, H, W] → y [N, C, OH, OW] (output size from y)
void CudaBackend::adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  const char* op = "adaptive_avg_pool2d";
  for (const Tensor* t : {&x, &y}) check_operand(op, *t);
  check_supported(Kernel::AdaptiveAvgPool2dForward, x.dtype());
  DP_CHECK(y.dtype() == x.dtype(), op, ": input ", x.str(), " and output ", y.str(), " have different dtypes");
  const PoolGeometry g = geometry_of(op, x, y);
  if (y.numel() == 0) return;
  DP_CHECK(g.H >= 1 && g.W >= 1, op, ": input ", x.str(), " has an empty plane");
  activate();
  DP_CUDA_CHECK(device_, launch_adaptive_avg_pool2d_forward(x.raw_data(), y.raw_data(), x.dtype(), g, stream_), op,
                " ", x.str(), " → ", y.str());
}

// dy [N, C, OH, OW] → dx [N, C, H, W] (overwritten)
void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  const char* op = "adaptive_avg_pool2d_backward";
  for (const Tensor* t : {&dy, &dx}) check_operand(op, *t);
  check_supported(Kernel::AdaptiveAvgPool2dBackward, dy.dtype());
  DP_CHECK(dx.dtype() == dy.dtype(), op, ": dy ", dy.str(), " and dx ", dx.str(), " have different dtypes");
  const PoolGeometry g = geometry_of(op, dx, dy);
  if (dx.numel() == 0) return;
  DP_CHECK(g.OH >= 1 && g.OW >= 1, op, ": output gradient ", dy.str(), " has an empty plane");
  activate();
  DP_CUDA_CHECK(device_, launch_adaptive_avg_pool2d_backward(dy.raw_data(), dx.raw_data(), dy.dtype(), g, stream_),
                op, " ", dy.str(), " → ", dx.str());
}

}  // namespace dp::cuda
