// Pooling kernels, NCHW-contiguous or channels-last (NOTE [ Channels-last ]): every (n, c) plane
// is independent. Each kernel is one template over the layout (kChannelsLast): a thread takes
// one element in memory order — so neighbouring threads touch neighbouring addresses in either
// layout (in NHWC they are neighbouring channels of one pixel) — and reaches the other elements
// of its plane through a PlaneView (element (h, w) at base + h·row + w·col).
// Forward kernels run one thread per output element and scan its window in the CPU backend's
// order (rows, then columns), so sums and tie-breaking match it. Backward kernels run one thread
// per INPUT element that gathers the outputs whose windows contain it (their range follows from
// the window arithmetic), adding in output order as the CPU's scatter does: deterministic, no
// atomics. Max pooling takes from those outputs the ones whose saved index is this element.
// Index arithmetic is int32 when every offset fits (int32 division is much cheaper), else int64.
// Channels-last max pooling has a second pair of kernels that take kVec<T> neighbouring channels of
// one pixel per thread (16-byte loads and stores, one set of index divisions for all of them); see
// the NOTE at them.
#include <climits>
#include <cstdint>
#include <type_traits>

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
  Index C, H, W, OH, OW;
  Index kh, kw, sh, sw, ph, pw;
  bool include_pad;
};

template <typename Index>
Geo<Index> narrow(const PoolGeometry& g) {
  return {static_cast<Index>(g.channels), static_cast<Index>(g.H),        static_cast<Index>(g.W),
          static_cast<Index>(g.OH),       static_cast<Index>(g.OW),       static_cast<Index>(g.kernel_h),
          static_cast<Index>(g.kernel_w), static_cast<Index>(g.stride_h), static_cast<Index>(g.stride_w),
          static_cast<Index>(g.pad_h),    static_cast<Index>(g.pad_w),    g.count_include_pad};
}

// Whether every intermediate of the kernels below fits in int32: flat offsets into x and y,
// window bounds (at most H + 2·pad + kernel + stride), and the adaptive products o·in (64 of
// headroom kept).
bool fits_int32(const PoolGeometry& g) {
  constexpr int64_t kLimit = int64_t(INT32_MAX) - 64;
  const auto ok = [&](int64_t v) { return v >= 0 && v <= kLimit; };
  // Each factor alone first, so the products below cannot overflow int64.
  for (int64_t v : {g.planes, g.channels, g.H, g.W, g.OH, g.OW, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w,
                    g.pad_h, g.pad_w})
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

// ---- Layouts -----------------------------------------------------------------------------------

// Element (h, w) of one (n, c) plane of a tensor is at base + h·row + w·col.
template <typename Index>
struct PlaneView {
  Index base, row, col;
  __device__ __forceinline__ Index at(Index h, Index w) const { return base + h * row + w * col; }
};

// Linear element e of a tensor with rows×cols planes, in memory order: its position (r, q) in its
// plane, and that plane's view in this tensor and in the other tensor of the pair (the same
// (n, c), planes of other_rows×other_cols). C is the channel count (used by channels-last only).
template <typename Index>
struct Located {
  Index r, q;
  PlaneView<Index> self, other;
};

template <bool kChannelsLast, typename Index>
__device__ __forceinline__ Located<Index> locate(Index e, Index C, Index rows, Index cols, Index other_rows,
                                                 Index other_cols) {
  Located<Index> l;
  if constexpr (kChannelsLast) {  // e = ((n·rows + r)·cols + q)·C + c
    const Index c = e % C, pixel = e / C;
    l.q = pixel % cols;
    const Index nr = pixel / cols;
    l.r = nr % rows;
    const Index n = nr / rows;
    l.self = {n * rows * cols * C + c, cols * C, C};
    l.other = {n * other_rows * other_cols * C + c, other_cols * C, C};
  } else {  // e = (plane·rows + r)·cols + q
    l.q = e % cols;
    const Index pr = e / cols;
    l.r = pr % rows;
    const Index plane = pr / rows;
    l.self = {plane * rows * cols, cols, 1};
    l.other = {plane * other_rows * other_cols, other_cols, 1};
  }
  return l;
}

// ---- Kernels ----------------------------------------------------------------------------------

// x [N, C, H, W] → y [N, C, OH, OW], indices int32 like y (h * W + w in the plane).
// One thread per output; total = N·C·OH·OW.
template <typename T, typename Index, bool kChannelsLast>
__global__ void max_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int32_t* __restrict__ indices,
                                          Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.OH, g.OW, g.H, g.W);
    const PlaneView<Index> in = l.other;
    const Index h0 = l.r * g.sh - g.ph, w0 = l.q * g.sw - g.pw;
    const Index hs = imax<Index>(h0, 0), he = imin<Index>(h0 + g.kh, g.H);
    const Index ws = imax<Index>(w0, 0), we = imin<Index>(w0 + g.kw, g.W);
    A best = A(-INFINITY);
    Index best_i = hs * g.W + ws;  // the window's first element, as the CPU backend
    for (Index h = hs; h < he; ++h) {
      for (Index w = ws; w < we; ++w) {
        const A v = convert<A>(x[in.at(h, w)]);
        // Strictly greater (first maximum wins), or NaN.
        if (v > best || v != v) {
          best = v;
          best_i = h * g.W + w;
        }
      }
    }
    y[i] = convert<T>(best);  // exact: best is one of the T inputs (or -inf for an empty window)
    indices[i] = static_cast<int32_t>(best_i);
  }
}

// Output oh's window rows are [oh·sh − ph, oh·sh − ph + kh), so row h lies in the windows of
// oh ∈ [ceil((h + ph − kh + 1) / sh), floor((h + ph) / sh)] ∩ [0, OH); the same for columns.
template <typename Index>
struct WindowRange {
  Index lo, hi;  // inclusive
};
template <typename Index>
__device__ __forceinline__ WindowRange<Index> outputs_covering(Index h, Index pad, Index kernel, Index stride,
                                                               Index outputs) {
  const Index n = h + pad - kernel + 1;
  return {n <= 0 ? Index(0) : (n + stride - 1) / stride, imin<Index>((h + pad) / stride, outputs - 1)};
}

// dy, indices [N, C, OH, OW] → dx [N, C, H, W] (overwritten). One thread per input element; it
// adds, in output order, the dy of every output whose window holds it and whose index names it.
template <typename T, typename Index, bool kChannelsLast>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ dy, const int32_t* __restrict__ indices,
                                           T* __restrict__ dx, Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.H, g.W, g.OH, g.OW);
    const Index h = l.r, w = l.q, me = h * g.W + w;
    const WindowRange<Index> rows = outputs_covering(h, g.ph, g.kh, g.sh, g.OH);
    const WindowRange<Index> cols = outputs_covering(w, g.pw, g.kw, g.sw, g.OW);
    A sum = A(0);
    for (Index oh = rows.lo; oh <= rows.hi; ++oh)
      for (Index ow = cols.lo; ow <= cols.hi; ++ow) {
        const Index o = l.other.at(oh, ow);
        if (static_cast<Index>(indices[o]) == me) sum += convert<A>(dy[o]);
      }
    dx[i] = convert<T>(sum);
  }
}

// Channels-last max pooling, V = kVec<T> channels per thread (8 for float16/bfloat16, 4 for
// float32, 2 for float64), used when C is a multiple of V and the operands are aligned to a
// vector (nhwc_vectorizable). The scalar kernels above spend most of their time in the integer
// divisions that locate an element (ResNet-50's stem pool: 6–10 per element); here one thread
// locates a pixel once for V channels and moves them with one 16-byte access per tensor. Each
// channel is scanned and compared exactly as in the scalar kernels, so results are the same bit
// for bit (ties: the first maximum; a NaN wins), and the backward stays a deterministic gather.
// groups = N·OH·OW·C / V (forward), N·H·W·C / V (backward); group g is channels [c0, c0 + V) of
// pixel g / (C / V) in memory order, so its first element is at g·V in the output (forward) or
// in dx (backward).
// Group `group` of V channels of a channels-last tensor with rows×cols planes: its first channel
// c0, its pixel (r, q) and its image n.
template <typename Index>
struct ChannelGroup {
  Index c0, r, q, n;
};
template <int V, typename Index>
__device__ __forceinline__ ChannelGroup<Index> locate_channel_group(Index group, Index C, Index rows, Index cols) {
  const Index channel_groups = C / V;
  const Index pixel = group / channel_groups, image_rows = pixel / cols;
  return {group % channel_groups * V, image_rows % rows, pixel % cols, image_rows / rows};
}

template <typename T, typename Index>
__global__ void max_pool2d_forward_nhwc_vec_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                   int32_t* __restrict__ indices, Geo<Index> g, int64_t groups) {
  constexpr int V = kVec<T>;
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < groups; i += grid_stride()) {
    const Index group = static_cast<Index>(i);
    const ChannelGroup<Index> at = locate_channel_group<V>(group, g.C, g.OH, g.OW);
    const Index h0 = at.r * g.sh - g.ph, w0 = at.q * g.sw - g.pw;
    const Index hs = imax<Index>(h0, 0), he = imin<Index>(h0 + g.kh, g.H);
    const Index ws = imax<Index>(w0, 0), we = imin<Index>(w0 + g.kw, g.W);
    const T* image = x + at.n * g.H * g.W * g.C + at.c0;
    A best[V];
    int32_t best_i[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      best[k] = A(-INFINITY);
      best_i[k] = static_cast<int32_t>(hs * g.W + ws);  // the window's first element, as the CPU backend
    }
    for (Index h = hs; h < he; ++h) {
      for (Index w = ws; w < we; ++w) {
        const Vec<T, V> v = *reinterpret_cast<const Vec<T, V>*>(image + (h * g.W + w) * g.C);
#pragma unroll
        for (int k = 0; k < V; ++k) {
          const A a = convert<A>(v.v[k]);
          if (a > best[k] || a != a) {  // strictly greater (first maximum wins), or NaN
            best[k] = a;
            best_i[k] = static_cast<int32_t>(h * g.W + w);
          }
        }
      }
    }
    Vec<T, V> out;
    Vec<int32_t, V> where;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      out.v[k] = convert<T>(best[k]);
      where.v[k] = best_i[k];
    }
    const Index o = group * V;
    *reinterpret_cast<Vec<T, V>*>(y + o) = out;
    *reinterpret_cast<Vec<int32_t, V>*>(indices + o) = where;
  }
}

template <typename T, typename Index>
__global__ void max_pool2d_backward_nhwc_vec_kernel(const T* __restrict__ dy, const int32_t* __restrict__ indices,
                                                    T* __restrict__ dx, Geo<Index> g, int64_t groups) {
  constexpr int V = kVec<T>;
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < groups; i += grid_stride()) {
    const Index group = static_cast<Index>(i);
    const ChannelGroup<Index> at = locate_channel_group<V>(group, g.C, g.H, g.W);
    const Index me = at.r * g.W + at.q;
    const WindowRange<Index> out_rows = outputs_covering(at.r, g.ph, g.kh, g.sh, g.OH);
    const WindowRange<Index> out_cols = outputs_covering(at.q, g.pw, g.kw, g.sw, g.OW);
    const Index image = at.n * g.OH * g.OW * g.C + at.c0;
    A sum[V];
#pragma unroll
    for (int k = 0; k < V; ++k) sum[k] = A(0);
    for (Index oh = out_rows.lo; oh <= out_rows.hi; ++oh) {
      for (Index ow = out_cols.lo; ow <= out_cols.hi; ++ow) {
        const Index o = image + (oh * g.OW + ow) * g.C;
        const Vec<int32_t, V> where = *reinterpret_cast<const Vec<int32_t, V>*>(indices + o);
        const Vec<T, V> d = *reinterpret_cast<const Vec<T, V>*>(dy + o);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (static_cast<Index>(where.v[k]) == me) sum[k] += convert<A>(d.v[k]);
      }
    }
    Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = convert<T>(sum[k]);
    *reinterpret_cast<Vec<T, V>*>(dx + group * V) = out;
  }
}

// x [N, C, H, W] → y [N, C, OH, OW]. One thread per output; total = N·C·OH·OW.
template <typename T, typename Index, bool kChannelsLast>
__global__ void avg_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.OH, g.OW, g.H, g.W);
    const PlaneView<Index> in = l.other;
    const Index h0 = l.r * g.sh - g.ph, w0 = l.q * g.sw - g.pw;
    const Index hs = imax<Index>(h0, 0), he = imin<Index>(h0 + g.kh, g.H);
    const Index ws = imax<Index>(w0, 0), we = imin<Index>(w0 + g.kw, g.W);
    A sum = A(0);
    for (Index h = hs; h < he; ++h)
      for (Index w = ws; w < we; ++w) sum += convert<A>(x[in.at(h, w)]);
    y[i] = convert<T>(sum / static_cast<A>(avg_divisor(h0, w0, g)));
  }
}

// dy [N, C, OH, OW] → dx [N, C, H, W] (overwritten). One thread per input element.
template <typename T, typename Index, bool kChannelsLast>
__global__ void avg_pool2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, Geo<Index> g, int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.H, g.W, g.OH, g.OW);
    const WindowRange<Index> rows = outputs_covering(l.r, g.ph, g.kh, g.sh, g.OH);
    const WindowRange<Index> cols = outputs_covering(l.q, g.pw, g.kw, g.sw, g.OW);
    A sum = A(0);
    for (Index oh = rows.lo; oh <= rows.hi; ++oh) {
      const Index h0 = oh * g.sh - g.ph;
      for (Index ow = cols.lo; ow <= cols.hi; ++ow) {
        const Index w0 = ow * g.sw - g.pw;
        sum += convert<A>(dy[l.other.at(oh, ow)]) / static_cast<A>(avg_divisor(h0, w0, g));
      }
    }
    dx[i] = convert<T>(sum);
  }
}

// x [N, C, H, W] → y [N, C, OH, OW]. One thread per output; total = N·C·OH·OW.
template <typename T, typename Index, bool kChannelsLast>
__global__ void adaptive_avg_pool2d_forward_kernel(const T* __restrict__ x, T* __restrict__ y, Geo<Index> g,
                                                   int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.OH, g.OW, g.H, g.W);
    const Index h0 = adaptive_start(l.r, g.H, g.OH), h1 = adaptive_end(l.r, g.H, g.OH);
    const Index w0 = adaptive_start(l.q, g.W, g.OW), w1 = adaptive_end(l.q, g.W, g.OW);
    A sum = A(0);
    for (Index h = h0; h < h1; ++h)
      for (Index w = w0; w < w1; ++w) sum += convert<A>(x[l.other.at(h, w)]);
    const int64_t count = int64_t(h1 - h0) * int64_t(w1 - w0);
    y[i] = convert<T>(sum / static_cast<A>(count));
  }
}

// dy [N, C, OH, OW] → dx [N, C, H, W] (overwritten). One thread per input element. Output oh's
// window [floor(oh·H/OH), ceil((oh+1)·H/OH)) contains row h exactly when
// oh ∈ [floor(h·OH/H), ceil((h+1)·OH/H)): the same bounds with H and OH swapped.
template <typename T, typename Index, bool kChannelsLast>
__global__ void adaptive_avg_pool2d_backward_kernel(const T* __restrict__ dy, T* __restrict__ dx, Geo<Index> g,
                                                    int64_t total) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < total; i += grid_stride()) {
    const Located<Index> l = locate<kChannelsLast>(static_cast<Index>(i), g.C, g.H, g.W, g.OH, g.OW);
    const Index h = l.r, w = l.q;
    const Index oh_lo = adaptive_start(h, g.OH, g.H), oh_hi = imin<Index>(adaptive_end(h, g.OH, g.H), g.OH);
    const Index ow_lo = adaptive_start(w, g.OW, g.W), ow_hi = imin<Index>(adaptive_end(w, g.OW, g.W), g.OW);
    A sum = A(0);
    for (Index oh = oh_lo; oh < oh_hi; ++oh) {
      const Index h0 = adaptive_start(oh, g.H, g.OH), h1 = adaptive_end(oh, g.H, g.OH);
      for (Index ow = ow_lo; ow < ow_hi; ++ow) {
        const Index w0 = adaptive_start(ow, g.W, g.OW), w1 = adaptive_end(ow, g.W, g.OW);
        const int64_t count = int64_t(h1 - h0) * int64_t(w1 - w0);
        sum += convert<A>(dy[l.other.at(oh, ow)]) / static_cast<A>(count);
      }
    }
    dx[i] = convert<T>(sum);
  }
}

template <bool kValue>
using Flag = std::integral_constant<bool, kValue>;

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Whether channels-last max pooling of T can take the vector kernels: whole vectors of channels,
// values aligned to 16 bytes and the int32 indices to a vector of V of them.
template <typename T>
bool nhwc_vectorizable(const PoolGeometry& g, const void* values_a, const void* values_b, const int32_t* indices) {
  constexpr int V = kVec<T>;
  return g.channels_last && g.channels % V == 0 && aligned16(values_a) && aligned16(values_b) &&
         aligned_to(indices, sizeof(int32_t) * V);
}

// Calls launch(T{}, Geo<Index>, Flag<channels_last>) with the dtype's element type, the narrowest
// index type and the layout.
template <typename Launch>
cudaError_t dispatch(DType dtype, const PoolGeometry& g, Launch&& launch) {
  const bool known = dispatch_floating_dtype(dtype, [&](auto tag) {
    auto with_layout = [&](auto geo) {
      if (g.channels_last) launch(tag, geo, Flag<true>{});
      else launch(tag, geo, Flag<false>{});
    };
    if (fits_int32(g)) with_layout(narrow<int32_t>(g));
    else with_layout(narrow<int64_t>(g));
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
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    if (nhwc_vectorizable<T>(g, x, y, indices)) {
      const int64_t groups = total / kVec<T>;
      max_pool2d_forward_nhwc_vec_kernel<T, Index><<<blocks_for(groups), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), indices, geo, groups);
      return;
    }
    max_pool2d_forward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), indices, geo, total);
  });
}

cudaError_t launch_max_pool2d_backward(const void* dy, const int32_t* indices, void* dx, DType dtype,
                                       const PoolGeometry& g, cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    if (nhwc_vectorizable<T>(g, dy, dx, indices)) {
      const int64_t groups = total / kVec<T>;
      max_pool2d_backward_nhwc_vec_kernel<T, Index><<<blocks_for(groups), kThreads, 0, stream>>>(
          static_cast<const T*>(dy), indices, static_cast<T*>(dx), geo, groups);
      return;
    }
    max_pool2d_backward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), indices, static_cast<T*>(dx), geo, total);
  });
}

cudaError_t launch_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                      cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    avg_pool2d_forward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), geo, total);
  });
}

cudaError_t launch_avg_pool2d_backward(const void* dy, void* dx, DType dtype, const PoolGeometry& g,
                                       cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    avg_pool2d_backward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), geo, total);
  });
}

cudaError_t launch_adaptive_avg_pool2d_forward(const void* x, void* y, DType dtype, const PoolGeometry& g,
                                               cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    adaptive_avg_pool2d_forward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(y), geo, total);
  });
}

cudaError_t launch_adaptive_avg_pool2d_backward(const void* dy, void* dx, DType dtype, const PoolGeometry& g,
                                                cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return cudaSuccess;
  return dispatch(dtype, g, [&](auto tag, auto geo, auto layout) {
    using T = decltype(tag);
    using Index = std::remove_cv_t<decltype(geo.H)>;
    adaptive_avg_pool2d_backward_kernel<T, Index, decltype(layout)::value><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const T*>(dy), static_cast<T*>(dx), geo, total);
  });
}

}  // namespace dp::cuda
