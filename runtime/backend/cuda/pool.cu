// Pooling kernels, NCHW contiguous: every (n, c) plane is independent. Forward kernels run one
// thread per output element and scan its window in the CPU backend's order (rows, then columns),
// so sums and tie-breaking match it. Backward kernels are deterministic and use no atomics:
//   - avg and adaptive avg: one thread per INPUT element gathers the outputs whose windows
//     contain it (their range follows from the window arithmetic), adding in the CPU's order;
//   - max: the interface passes no window geometry to the backward (backend.h), so the inputs an
//     output points at are known only through its index. One warp owns a plane: it zeroes dx,
//     then walks the plane's outputs 32 at a time in order; lanes whose indices coincide are
//     grouped with __match_any_sync and the group's lowest lane adds their dy in output order
//     to dx. Planes are disjoint and a plane has one writer, so no two threads ever write the
//     same element, and each dx element receives its terms in the CPU's order.
// Index arithmetic is int32 when every offset fits (int32 division is much cheaper), else int64.
#include <climits>
#include <cstdint>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/pool_kernels.h"

namespace dp::cuda {

using namespace device;

namespace {

template <typename I>
__device__ __forceinline__ I imin(I a, I b) { return a < b ? a : b; }
template <typename I>
__device__ __forceinline__ I imax(I a, I b) { return a > b ? a : b; }

// PoolGeometry in the kernel's index type.
template <typename Index>
struct Geo {
  Index H, W, OH, OW;
  Index kh, kw, sh, sw, ph, pw;
  bool include_pad;
};

template <typename Index>
Geo<Index> narrow(const PoolGeometry& g) {
  return {static_cast<Index>(g.H),        static_cast<Index>(g.W),        static_cast<Index>(g.OH),
          static_cast<Index>(g.OW),       static_cast<Index>(g.kernel_h), static_cast<Index>(g.kernel_w),
          static_cast<Index>(g.stride_h), static_cast<Index>(g.stride_w), static_cast<Index>(g.pad_h),
          static_cast<Index>(g.pad_w),    g.count_include_pad};
}

// Whether every intermediate of the kernels below fits in int32: flat offsets into x and y,
// window bounds (at most H + 2·pad + kernel + stride), and the adaptive products o·in. The
// limit keeps 64 of headroom: the max-pool backward's warp loops step an int32 index by 32 past
// the plane's last element (e += 32, base + lane), which must not overflow.
bool fits_int32(const PoolGeometry& g) {
  constexpr int64_t kLimit = int64_t(INT32_MAX) - 64;
  const auto ok = [&](int64_t v) { return v >= 0 && v <= kLimit; };
  // Each factor alone first, so the products below cannot overflow int64.
  for (int64_t v : {g.planes, g.H, g.W, g.OH, g.OW, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h, g.pad_w})
    if (!ok(v)) return false;
  return ok(g.planes * g.H * g.W) && ok(g.planes * g.OH * g.OW) && ok(g.H + 2 * g.pad_h + g.kernel_h + g.stride_h) &&
         ok(g.W + 2 * g.pad_w + g.kernel_w + g.stride_w) && ok((g.OH + 1) * (g.H + 1)) && ok((g.OW + 1) * (g.W + 1));
}

// Divisor of the average-pool window starting at (h0, w0), as the CPU backend (ceil_mode off).
// int64: a huge kernel's area can pass 2^31 even when every offset fits in int32.
template <typename Index>
__device__ __forceinline__ int64_t avg_divisor(Index h0, Index w0, const Geo<Index>& g) {
  if (g.include_pad) {
    const int64_t h1 = imin<int64_t>(int64_t(h0) + g.kh, int64_t(g.H) + g.ph);
    const int64_t w1 = imin<int64_t>(int64_t(w0) + g.kw, int64_t(g.W) + g.pw);
    return (h1 - h0) * (w1 - w0);
  }
  const int64_t hs = imax<int64_t>(h0, 0), ws = imax<int64_t>(w0, 0);
  const int64_t he = imin<int64_t>(int64_t(h0) + g.kh, g.H), we = imin<int64_t>(int64_t(w0) + g.kw, g.W);
  return imax<int64_t>((he - hs) * (we - ws), 1);
}

// Adaptive window [start, end) of output o (PyTorch's floor/ceil bounds).
template <typename Index>
__device__ __forceinline__ Index adaptive_start(Index o, Index in, Index out) { return (o * in) / out; }
template <typename Index>
__device__ __forceinline__ Index adaptive_end(Index o, Index in, Index out) { return ((o + 1) * in + out - 1) / out; }

// ---- Kernels ----------------------------------------------------------------------------------

// x [planes, H, W] → y [planes, OH, OW], indices int32 [planes, OH, OW] (h * W + w in the plane).
// One thread per output; total = planes * OH * OW.
template <typename T, typename Index>
__global__ void max_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ indices,
                                          Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Index o = static_cast<Index>(i);
    const Index ow = o % g.OW, rest = o / g.OW;
    const Index oh = rest % g.OH, plane = rest / g.OH;
    const T* in = x + plane * g.H * g.W;
    const Index h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    const Index hs = imax<Index>(h0, 0), he = imin<Index>(h0 + g.kh, g.H);
    const Index ws = imax<Index>(w0, 0), we = imin<Index>(w0 + g.kw, g.W);
    A best = A(-INFINITY);
    Index best_i = -1;
    for (Index h = hs; h < he; ++h) {
      for (Index w = ws; w < we; ++w) {
        const A v = convert<A>(in[h * g.W + w]);
        // The first element always; then strictly greater (first maximum wins), or NaN.
        if (best_i < 0 || v > best || v != v) {
          best = v;
          best_i = h * g.W + w;
        }
      }
    }
    y[i] = convert<T>(best);  // exact: best is one of the T inputs (or -inf for an empty window)
    indices[i] = static_cast<int32_t>(best_i);
  }
}

// dy [planes, OH, OW], indices int32 [planes, OH, OW] → dx [planes, H, W] (overwritten).
// One warp per plane (warps grid-stride over planes); see the file comment.
template <typename T, typename Index>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ indices,
                                           T* __restrict__ dx, int64_t planes, Index in_plane, Index out_plane) {
  using A = acc_t<T>;
  constexpr unsigned kFull = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = grid_stride() / 32;
  // Warp-uniform loops only: every lane runs every iteration, so the full-mask intrinsics below
  // always see the whole warp.
  for (int64_t plane = first_index() / 32; plane < planes; plane += warps) {
    T* out = dx + plane * in_plane;
    const T* grad = dy + plane * out_plane;
    const int32_t* idx = indices + plane * out_plane;
    for (Index e = lane; e < in_plane; e += 32) out[e] = convert<T>(A(0));
    __syncwarp();  // orders the zeroing before the lanes' reads below
    for (Index base = 0; base < out_plane; base += 32) {
      const Index o = base + lane;
      int32_t target = -1;  // -1: no output (past the plane's end) or an index outside the plane
      A v = A(0);
      if (o < out_plane) {
        const int32_t k = idx[o];
        if (k >= 0 && static_cast<Index>(k) < in_plane) {
          target = k;
          v = convert<A>(grad[o]);
        }
      }
      const unsigned same = __match_any_sync(kFull, target);  // lanes with this lane's target
      const bool writer = target >= 0 && __ffs(static_cast<int>(same)) - 1 == lane;
      A sum = writer ? convert<A>(out[target]) : A(0);
      if (__all_sync(kFull, __popc(same) == 1 || target < 0)) {
        sum += v;  // no two lanes share a target (non-overlapping windows: the common case)
      } else {
        for (int j = 0; j < 32; ++j) {  // in output order, after what earlier chunks added
          const A vj = __shfl_sync(kFull, v, j);
          if ((same >> j) & 1u) sum += vj;
        }
      }
      if (writer) out[target] = convert<T>(sum);
      __syncwarp();  // this chunk's writes before the next chunk's reads (possibly other lanes)
    }
  }
}

// x [planes, H, W] → y [planes, OH, OW]. One thread per output; total = planes * OH * OW.
template <typename T, typename Index>
__global__ void avg_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Index o = static_cast<Index>(i);
    const Index ow = o % g.OW, rest = o / g.OW;
    const Index oh = rest % g.OH, plane = rest / g.OH;
    const T* in = x + plane * g.H * g.W;
    const Index h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    const Index hs = imax<Index>(h0, 0), he = imin<Index>(h0 + g.kh, g.H);
    const Index ws = imax<Index>(w0, 0), we = imin<Index>(w0 + g.kw, g.W);
    A sum = A(0);
    for (Index h = hs; h < he; ++h)
      for (Index w = ws; w < we; ++w) sum += convert<A>(in[h * g.W + w]);
    y[i] = convert<T>(sum / static_cast<A>(avg_divisor(h0, w0, g)));
  }
}

// dy [planes, OH, OW] → dx [planes, H, W] (overwritten). One thread per input element;
// total = planes * H * W. Output oh's window rows are [oh·sh − ph, oh·sh − ph + kh), so row h
// lies in the windows of oh ∈ [ceil((h + ph − kh + 1) / sh), floor((h + ph) / sh)] ∩ [0, OH).
template <typename T, typename Index>
__global__ void avg_pool2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Index e = static_cast<Index>(i);
    const Index w = e % g.W, rest = e / g.W;
    const Index h = rest % g.H, plane = rest / g.H;
    const T* grad = dy + plane * g.OH * g.OW;
    const Index nh = h + g.ph - g.kh + 1, nw = w + g.pw - g.kw + 1;
    const Index oh_lo = nh <= 0 ? Index(0) : (nh + g.sh - 1) / g.sh;
    const Index ow_lo = nw <= 0 ? Index(0) : (nw + g.sw - 1) / g.sw;
    const Index oh_hi = imin<Index>((h + g.ph) / g.sh, g.OH - 1);  // inclusive
    const Index ow_hi = imin<Index>((w + g.pw) / g.sw, g.OW - 1);
    A sum = A(0);
    for (Index oh = oh_lo; oh <= oh_hi; ++oh) {
      const Index h0 = oh * g.sh - g.ph;
      for (Index ow = ow_lo; ow <= ow_hi; ++ow) {
        const Index w0 = ow * g.sw - g.pw;
        sum += convert<A>(grad[oh * g.OW + ow]) / static_cast<A>(avg_divisor(h0, w0, g));
      }
    }
    dx[i] = convert<T>(sum);
  }
}

// x [planes, H, W] → y [planes, OH, OW]. One thread per output; total = planes * OH * OW.
template <typename T, typename Index>
__global__ void adaptive_avg_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, Geo<Index> g,
                                                   int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Index o = static_cast<Index>(i);
    const Index ow = o % g.OW, rest = o / g.OW;
    const Index oh = rest % g.OH, plane = rest / g.OH;
    const T* in = x + plane * g.H * g.W;
    const Index h0 = adaptive_start(oh, g.H, g.OH), h1 = adaptive_end(oh, g.H, g.OH);
    const Index w0 = adaptive_start(ow, g.W, g.OW), w1 = adaptive_end(ow, g.W, g.OW);
    A sum = A(0);
    for (Index h = h0; h < h1; ++h)
      for (Index w = w0; w < w1; ++w) sum += convert<A>(in[h * g.W + w]);
    const int64_t count = int64_t(h1 - h0) * int64_t(w1 - w0);
    y[i] = convert<T>(sum / static_cast<A>(count));
  }
}

// dy [planes, OH, OW] → dx [planes, H, W] (overwritten). One thread per input element;
// total = planes * H * W. Output oh's window [floor(oh·H/OH), ceil((oh+1)·H/OH)) contains row h
// exactly when oh ∈ [floor(h·OH/H), ceil((h+1)·OH/H)): the same bounds with H and OH swapped.
template <typename T, typename Index>
__global__ void adaptive_avg_pool2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, Geo<Index> g,
                                                    int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Index e = static_cast<Index>(i);
    const Index w = e % g.W, rest = e / g.W;
    const Index h = rest % g.H, plane = rest / g.H;
    const T* grad = dy + plane * g.OH * g.OW;
    const Index oh_lo = adaptive_start(h, g.OH, g.H), oh_hi = imin<Index>(adaptive_end(h, g.OH, g.H), g.OH);
    const Index ow_lo = adaptive_start(w, g.OW, g.W), ow_hi = imin<Index>(adaptive_end(w, g.OW, g.W), g.OW);
    A sum = A(0);
    for (Index oh = oh_lo; oh < oh_hi; ++oh) {
      const Index h0 = adaptive_start(oh, g.H, g.OH), h1 = adaptive_end(oh, g.H, g.OH);
      for (Index ow = ow_lo; ow < ow_hi; ++ow) {
        const Index w0 = adaptive_start(ow, g.W, g.OW), w1 = adaptive_end(ow, g.W, g.OW);
        const int64_t count = int64_t(h1 - h0) * int64_t(w1 - w0);
        sum += convert<A>(grad[oh * g.OW + ow]) / static_cast<A>(count);
      }
    }
    dx[i] = convert<T>(sum);
  }
}

// Calls launch(T{}, Geo<Index>) with the dtype's element type and the narrowest index type.
template <typename Launch>
cudaError_t dispatch(DType dtype, const PoolGeometry& g, Launch&& launch) {
  const bool known = dispatch_floating_dtype(dtype, [&](auto tag) {
    if (fits_int32(g)) launch(tag, narrow<int32_t>(g));
    else launch(tag, narrow<int64_t>(g));
  });
  if (!known) return cudaErrorInvalidValue;  // the front-end checked supports(): unreachable
  return cudaGetLastError();
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

cudaError_t launch_max_pool2d_forward(const void* x, void* y, int32_t* indices, DType dtype, const PoolGeometry& g,
                                      cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    max_pool2d_forward_kernel<T, Index><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), indices, geo, total);
  });
}

cudaError_t launch_max_pool2d_backward(const void* dy, const int32_t* indices, void* dx, DType dtype,
                                       const PoolGeometry& g, cudaStream_t stream) {
  if (g.planes * g.H * g.W == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    max_pool2d_backward_kernel<T, Index><<<blocks_for(g.planes * 32), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), indices, static_cast<T*>(dx), g.planes, static_cast<Index>(g.H * g.W),
        static_cast<Index>(g.OH * g.OW));
  });
}

cudaError_t launch_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                      cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    avg_pool2d_forward_kernel<T, Index><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                                                   static_cast<T*>(y), geo, total);
  });
}

cudaError_t launch_avg_pool2d_backward(const void* dy, void* dx, DType dtype, const PoolGeometry& g,
                                       cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    avg_pool2d_backward_kernel<T, Index><<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(dy),
                                                                                    static_cast<T*>(dx), geo, total);
  });
}

cudaError_t launch_adaptive_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                               cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    adaptive_avg_pool2d_forward_kernel<T, Index><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), geo, total);
  });
}

cudaError_t launch_adaptive_avg_pool2d_backward(const void* dy, void* dx, DType dtype, const PoolGeometry& g,
                                                cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    adaptive_avg_pool2d_backward_kernel<T, Index><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), geo, total);
  });
}

}  // namespace dp::cuda
