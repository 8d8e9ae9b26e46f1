// Channels-last pooling on the CPU (pool_channels_last.h).
#include "runtime/backend/cpu/pool_channels_last.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/pool_window.h"

namespace dp::cpu {

namespace {

// [N, C, H, W] input side and [N, C, OH, OW] output side, NHWC in memory.
struct Pixels {
  int64_t N, C, H, W, OH, OW;
  Pixels(const Tensor& in, const Tensor& out)
      : N(in.size(0)), C(in.size(1)), H(in.size(2)), W(in.size(3)), OH(out.size(2)), OW(out.size(3)) {}
  int64_t in_pixel(int64_t n, int64_t h, int64_t w) const { return ((n * H + h) * W + w) * C; }
  int64_t out_pixel(int64_t n, int64_t oh, int64_t ow) const { return ((n * OH + oh) * OW + ow) * C; }
};

bool parallel(const Pixels& s) { return s.N * s.C * s.H * s.W > kParallelGrain; }

// Calls fn(n, oh, ow, sum) for every output pixel, rows (n, oh) split between threads;
// `sum` is a zeroed per-thread buffer of C compute values the function may use.
template <typename T, typename Fn>
void for_each_output_pixel(const Pixels& s, int threads, Fn&& fn) {
#pragma omp parallel num_threads(threads) if (parallel(s))
  {
    std::vector<compute_t<T>> sum(static_cast<size_t>(s.C));
#pragma omp for schedule(static)
    for (int64_t row = 0; row < s.N * s.OH; ++row)
      for (int64_t ow = 0; ow < s.OW; ++ow) {
        std::fill(sum.begin(), sum.end(), compute_t<T>(0));
        fn(row / s.OH, row % s.OH, ow, sum.data());
      }
  }
}

// Backward: every image's dx [H, W, C] is zeroed and scattered into, images split between
// threads; body(n, acc) adds into the image's accumulator (float32 for float16/bfloat16, rounded
// into dx once at the end, as pool.cpp's accumulate_plane).
template <typename T, typename Body>
void for_each_dx_image(const Pixels& s, int threads, T* dxp, Body&& body) {
  using C = compute_t<T>;
  const int64_t size = s.H * s.W * s.C;
#pragma omp parallel num_threads(threads) if (parallel(s))
  {
    std::vector<C> scratch;
#pragma omp for schedule(static)
    for (int64_t n = 0; n < s.N; ++n) {
      T* out = dxp + n * size;
      if constexpr (std::is_same_v<T, C>) {
        std::fill(out, out + size, T(0));
        body(n, out);
      } else {
        scratch.assign(static_cast<size_t>(size), C(0));
        body(n, scratch.data());
        narrow(scratch.data(), out, size);
      }
    }
  }
}

// acc[c] += in[c] across one pixel's channels.
template <typename T, typename C>
inline void add_pixel(C* acc, const T* in, int64_t channels) {
#pragma omp simd
  for (int64_t c = 0; c < channels; ++c) acc[c] += static_cast<C>(in[c]);
}

}  // namespace

void max_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p,
                                      int threads) {
  const Pixels s(x, y);
  int32_t* ip = indices.data<int32_t>();
  dispatch_floating_and_half(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel num_threads(threads) if (parallel(s))
    {
      std::vector<C> best(static_cast<size_t>(s.C));
      std::vector<int32_t> best_i(static_cast<size_t>(s.C));
#pragma omp for schedule(static)
      for (int64_t row = 0; row < s.N * s.OH; ++row) {
        const int64_t n = row / s.OH, oh = row % s.OH;
        const int64_t h0 = oh * p.stride_h - p.pad_h;
        const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + p.kernel_h, s.H);
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t w0 = ow * p.stride_w - p.pad_w;
          const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + p.kernel_w, s.W);
          // As the NCHW kernel: -inf and the window's first index, then strict '>' or NaN takes.
          std::fill(best.begin(), best.end(), -std::numeric_limits<C>::infinity());
          std::fill(best_i.begin(), best_i.end(), static_cast<int32_t>(h_begin * s.W + w_begin));
          C* b = best.data();
          int32_t* bi = best_i.data();
          for (int64_t h = h_begin; h < h_end; ++h)
            for (int64_t w = w_begin; w < w_end; ++w) {
              const T* in = xp + s.in_pixel(n, h, w);
              const int32_t i = static_cast<int32_t>(h * s.W + w);
#pragma omp simd
              for (int64_t c = 0; c < s.C; ++c) {
                const C v = static_cast<C>(in[c]);
                const bool take = (v > b[c]) | (v != v);
                b[c] = take ? v : b[c];
                bi[c] = take ? i : bi[c];
              }
            }
          T* out = yp + s.out_pixel(n, oh, ow);
          int32_t* idx = ip + s.out_pixel(n, oh, ow);
          for (int64_t c = 0; c < s.C; ++c) {
            out[c] = static_cast<T>(b[c]);
            idx[c] = bi[c];
          }
        }
      }
    }
  });
}

void max_pool2d_backward_channels_last(const Tensor& dy, const Tensor& indices, const Tensor& dx, int threads) {
  const Pixels s(dx, dy);
  const int32_t* ip = indices.data<int32_t>();
  dispatch_floating_and_half(dy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    for_each_dx_image(s, threads, dx.data<T>(), [&](int64_t n, C* acc) {
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const T* g = gp + s.out_pixel(n, oh, ow);
          const int32_t* idx = ip + s.out_pixel(n, oh, ow);
          for (int64_t c = 0; c < s.C; ++c) acc[idx[c] * s.C + c] += static_cast<C>(g[c]);
        }
    });
  });
}

void avg_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, const Pool2dParams& p, int threads) {
  const Pixels s(x, y);
  dispatch_floating_and_half(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for_each_output_pixel<T>(s, threads, [&](int64_t n, int64_t oh, int64_t ow, C* sum) {
      const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
      for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + p.kernel_h, s.H); ++h)
        for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + p.kernel_w, s.W); ++w)
          add_pixel(sum, xp + s.in_pixel(n, h, w), s.C);
      const C divisor = static_cast<C>(avg_divisor(h0, w0, p, s.H, s.W));
      T* out = yp + s.out_pixel(n, oh, ow);
#pragma omp simd
      for (int64_t c = 0; c < s.C; ++c) out[c] = static_cast<T>(sum[c] / divisor);
    });
  });
}

void avg_pool2d_backward_channels_last(const Tensor& dy, const Tensor& dx, const Pool2dParams& p, int threads) {
  const Pixels s(dx, dy);
  dispatch_floating_and_half(dy.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    for_each_dx_image(s, threads, dx.data<T>(), [&](int64_t n, C* acc) {
      std::vector<C> share(static_cast<size_t>(s.C));
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
          const C divisor = static_cast<C>(avg_divisor(h0, w0, p, s.H, s.W));
          const T* g = gp + s.out_pixel(n, oh, ow);
          for (int64_t c = 0; c < s.C; ++c) share[c] = static_cast<C>(g[c]) / divisor;
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + p.kernel_h, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + p.kernel_w, s.W); ++w)
              add_pixel(acc + (h * s.W + w) * s.C, share.data(), s.C);
        }
    });
  });
}

void adaptive_avg_pool2d_forward_channels_last(const Tensor& x, const Tensor& y, int threads) {
  const Pixels s(x, y);
  dispatch_floating_and_half(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for_each_output_pixel<T>(s, threads, [&](int64_t n, int64_t oh, int64_t ow, C* sum) {
      const int64_t h0 = adaptive_start(oh, s.H, s.OH), h1 = adaptive_end(oh, s.H, s.OH);
      const int64_t w0 = adaptive_start(ow, s.W, s.OW), w1 = adaptive_end(ow, s.W, s.OW);
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) add_pixel(sum, xp + s.in_pixel(n, h, w), s.C);
      const C count = static_cast<C>((h1 - h0) * (w1 - w0));
      T* out = yp + s.out_pixel(n, oh, ow);
#pragma omp simd
      for (int64_t c = 0; c < s.C; ++c) out[c] = static_cast<T>(sum[c] / count);
    });
  });
}

void adaptive_avg_pool2d_backward_channels_last(const Tensor& dy, const Tensor& dx, int threads) {
  const Pixels s(dx, dy);
  dispatch_floating_and_half(dy.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    for_each_dx_image(s, threads, dx.data<T>(), [&](int64_t n, C* acc) {
      std::vector<C> share(static_cast<size_t>(s.C));
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, s.H, s.OH), h1 = adaptive_end(oh, s.H, s.OH);
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, s.W, s.OW), w1 = adaptive_end(ow, s.W, s.OW);
          const C count = static_cast<C>((h1 - h0) * (w1 - w0));
          const T* g = gp + s.out_pixel(n, oh, ow);
          for (int64_t c = 0; c < s.C; ++c) share[c] = static_cast<C>(g[c]) / count;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) add_pixel(acc + (h * s.W + w) * s.C, share.data(), s.C);
        }
      }
    });
  });
}

}  // namespace dp::cpu
