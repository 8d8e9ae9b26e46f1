// Pooling on the CPU, NCHW contiguous; every (n, c) plane is independent, so planes are spread
// over the threads. Channels-last operands go to pool_channels_last.cpp's kernels.
#include <algorithm>
#include <limits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <type_traits>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/pool_window.h"
#include "runtime/backend/cpu/pool_channels_last.h"

namespace dp {

using namespace cpu;

namespace {

struct Planes {
  int64_t count, H, W, OH, OW;
  Planes(const Tensor& x, const Tensor& y)
      : count(x.size(0) * x.size(1)), H(x.size(2)), W(x.size(3)), OH(y.size(2)), OW(y.size(3)) {}
};

// Backward kernels scatter-add into each input plane: in compute_t<T> (float32 for
// float16/bfloat16, rounded once at the end), so overlapping windows do not round at every add.
// body(work) adds into the zeroed plane `work` of H*W values.
template <typename T, typename Body>
void accumulate_plane(T* out, int64_t size, std::vector<compute_t<T>>& scratch, Body&& body) {
  using C = compute_t<T>;
  if constexpr (std::is_same_v<T, C>) {
    std::fill(out, out + size, T(0));
    body(out);
  } else {
    scratch.assign(static_cast<size_t>(size), C(0));
    body(scratch.data());
    narrow(scratch.data(), out, size);
  }
}

// Runs body(plane, work) for every plane of dx (planes split between threads), each into a zeroed
// accumulator through accumulate_plane.
template <typename T, typename Body>
void for_each_dx_plane(const Planes& s, int threads, T* dxp, Body&& body) {
#pragma omp parallel num_threads(threads) if (s.count * s.H * s.W > kParallelGrain)
  {
    std::vector<compute_t<T>> scratch;
#pragma omp for schedule(static)
    for (int64_t plane = 0; plane < s.count; ++plane)
      accumulate_plane(dxp + plane * s.H * s.W, s.H * s.W, scratch, [&](auto* out) { body(plane, out); });
  }
}

bool channels_last(const char* op, std::initializer_list<const Tensor*> tensors) {
  return common_memory_format(op, tensors) == MemoryFormat::ChannelsLast;
}

}  // namespace


// x [N, C, H, W] → y [N, C, OH, OW], indices int32 (h * W + w within the plane)
void CpuBackend::max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p) {
  if (channels_last("max_pool2d", {&x, &y, &indices}))
    return cpu::max_pool2d_forward_channels_last(x, y, indices, p, num_threads_);
  const Planes s(x, y);
  int32_t* ip = indices.data<int32_t>();
  dispatch_floating_and_half(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const bool fast_2x2 = p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
                          p.pad_h == 0 && p.pad_w == 0;
    // Locals, not members read through references: the compiler can then keep them in registers
    // (the stores to out/idx could otherwise alias them).
    const int64_t H = s.H, W = s.W, OH = s.OH, OW = s.OW;
    const Pool2dParams q = p;
    auto pool_plane = [=](const C* in, C* out, int32_t* idx) {  // by value: see above
      if (fast_2x2) {
        for (int64_t oh = 0; oh < OH; ++oh) {
          const C* r0 = in + 2 * oh * W;
          const C* r1 = r0 + W;
          int64_t ow = 0;
#if defined(__AVX512F__)
          if constexpr (std::is_same_v<C, float>) {  // 16 windows at once, the same selects as below
            const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
            const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            const __m512i one = _mm512_set1_epi32(1), row = _mm512_set1_epi32(static_cast<int32_t>(W));
            // Rows are often narrower than 16 windows (28 → 14, 14 → 7): the last block is masked.
            for (; ow < OW; ow += 16) {
              const int64_t n = std::min<int64_t>(16, OW - ow);
              const __mmask16 lo = n >= 8 ? __mmask16(0xffff) : __mmask16((1u << (2 * n)) - 1);
              const __mmask16 hi = n > 8 ? __mmask16((1u << (2 * n - 16)) - 1) : __mmask16(0);
              const __mmask16 store = __mmask16((1u << n) - 1);
              const __m512 a0 = _mm512_maskz_loadu_ps(lo, r0 + 2 * ow), a1 = _mm512_maskz_loadu_ps(hi, r0 + 2 * ow + 16);
              const __m512 b0 = _mm512_maskz_loadu_ps(lo, r1 + 2 * ow), b1 = _mm512_maskz_loadu_ps(hi, r1 + 2 * ow + 16);
              const __m512 c0 = _mm512_permutex2var_ps(a0, even, a1), c1 = _mm512_permutex2var_ps(a0, odd, a1);
              const __m512 c2 = _mm512_permutex2var_ps(b0, even, b1), c3 = _mm512_permutex2var_ps(b0, odd, b1);
              const __m512i i0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(2 * oh * W + 2 * ow)), even);
              __m512 best = c0;
              __m512i best_i = i0;
              auto take = [&](__m512 c, __m512i i) {
                const __mmask16 t = _mm512_cmp_ps_mask(c, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
                best = _mm512_mask_mov_ps(best, t, c);
                best_i = _mm512_mask_mov_epi32(best_i, t, i);
              };
              take(c1, _mm512_add_epi32(i0, one));
              take(c2, _mm512_add_epi32(i0, row));
              take(c3, _mm512_add_epi32(_mm512_add_epi32(i0, row), one));
              _mm512_mask_storeu_ps(out + oh * OW + ow, store, best);
              _mm512_mask_storeu_epi32(idx + oh * OW + ow, store, best_i);
            }
          }
#endif
          for (; ow < OW; ++ow) {
            // Strict '>' keeps the first maximum in scan order, as PyTorch; NaN wins. Written as
            // selects, not branches: on real activations the comparisons are unpredictable.
            const int32_t i0 = static_cast<int32_t>(2 * oh * W + 2 * ow), i2 = i0 + static_cast<int32_t>(W);
            C best = r0[2 * ow];
            int32_t best_i = i0;
            const C c1 = r0[2 * ow + 1], c2 = r1[2 * ow], c3 = r1[2 * ow + 1];
            bool take = (c1 > best) | (c1 != c1);  // `|`, not `||`: no branch, the loop vectorises
            best = take ? c1 : best;
            best_i = take ? i0 + 1 : best_i;
            take = (c2 > best) | (c2 != c2);
            best = take ? c2 : best;
            best_i = take ? i2 : best_i;
            take = (c3 > best) | (c3 != c3);
            best = take ? c3 : best;
            best_i = take ? i2 + 1 : best_i;
            out[oh * OW + ow] = best;
            idx[oh * OW + ow] = best_i;
          }
        }
        return;
      }
      // Any other window (ResNet's 3×3 stride-2 stem pool): scan order and ties as PyTorch —
      // the maximum starts at -inf with the window's first index, strict '>' or NaN takes over.
      // 16 windows of a row at once, one gather per tap (bench/conv_bench rn.pool, 2 threads:
      // 0.96 ms; the scalar loop 2.6 ms, PyTorch 2.3 ms).
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t h0 = oh * q.stride_h - q.pad_h;
        const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + q.kernel_h, H);
        int64_t ow = 0;
#if defined(__AVX512F__)
        if constexpr (std::is_same_v<C, float>) {
          const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
          const __m512i zero = _mm512_setzero_si512(), width = _mm512_set1_epi32(static_cast<int32_t>(W));
          const __m512i stride = _mm512_set1_epi32(static_cast<int32_t>(q.stride_w));
          for (; ow < OW; ow += 16) {
            const __mmask16 active = static_cast<__mmask16>((1u << std::min<int64_t>(16, OW - ow)) - 1);
            // First column of each window, and of its part inside the image.
            const __m512i w0 = _mm512_sub_epi32(
                _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(ow)), lane), stride),
                _mm512_set1_epi32(static_cast<int32_t>(q.pad_w)));
            const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
            __m512 best = lowest;
            __m512i best_i = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(h_begin * W)), _mm512_max_epi32(w0, zero));
            for (int64_t h = h_begin; h < h_end; ++h) {
              const __m512i row = _mm512_set1_epi32(static_cast<int32_t>(h * W));
              for (int64_t kw = 0; kw < q.kernel_w; ++kw) {
                const __m512i col = _mm512_add_epi32(w0, _mm512_set1_epi32(static_cast<int32_t>(kw)));
                const __mmask16 inside = active & _mm512_cmpge_epi32_mask(col, zero) & _mm512_cmplt_epi32_mask(col, width);
                const __m512i i = _mm512_add_epi32(row, col);
                const __m512 v = _mm512_mask_i32gather_ps(lowest, inside, i, in, 4);  // no chain through best
                const __mmask16 take =
                    inside & (_mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
                best = _mm512_mask_mov_ps(best, take, v);
                best_i = _mm512_mask_mov_epi32(best_i, take, i);
              }
            }
            _mm512_mask_storeu_ps(out + oh * OW + ow, active, best);
            _mm512_mask_storeu_epi32(idx + oh * OW + ow, active, best_i);
          }
        }
#endif
        for (; ow < OW; ++ow) {
          const int64_t w0 = ow * q.stride_w - q.pad_w;
          const int64_t w_begin = std::max<int64_t>(w0, 0), w_end = std::min(w0 + q.kernel_w, W);
          int32_t best_i = static_cast<int32_t>(h_begin * W + w_begin);
          C best = -std::numeric_limits<C>::infinity();
          for (int64_t h = h_begin; h < h_end; ++h) {
            for (int64_t w = w_begin; w < w_end; ++w) {
              const int32_t i = static_cast<int32_t>(h * W + w);
              const C v = in[i];
              const bool take = (v > best) | (v != v);
              best = take ? v : best;
              best_i = take ? i : best_i;
            }
          }
          out[oh * OW + ow] = best;
          idx[oh * OW + ow] = best_i;
        }
      }
    };
#pragma omp parallel num_threads(num_threads_) if (s.count * H * W > kParallelGrain)
    {
      std::vector<C> wide_in, wide_out;  // float16/bfloat16 planes in float32 (half_convert.h)
#pragma omp for schedule(static)
      for (int64_t plane = 0; plane < s.count; ++plane) {
        int32_t* idx = ip + plane * OH * OW;
        if constexpr (is_half_type_v<T>) {
          wide_in.resize(static_cast<size_t>(H * W));
          wide_out.resize(static_cast<size_t>(OH * OW));
          widen(xp + plane * H * W, wide_in.data(), H * W);
          pool_plane(wide_in.data(), wide_out.data(), idx);
          narrow(wide_out.data(), yp + plane * OH * OW, OH * OW);
        } else {
          pool_plane(xp + plane * H * W, yp + plane * OH * OW, idx);
        }
      }
    }
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx, const Pool2dParams&) {
  if (channels_last("max_pool2d_backward", {&dy, &indices, &dx}))
    return cpu::max_pool2d_backward_channels_last(dy, indices, dx, num_threads_);
  const Planes s(dx, dy);
  const int32_t* ip = indices.data<int32_t>();
  dispatch_floating_and_half(dy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    T* dxp = dx.data<T>();
    for_each_dx_plane(s, num_threads_, dxp, [&](int64_t plane, auto* out) {
      const T* g = gp + plane * s.OH * s.OW;
      const int32_t* idx = ip + plane * s.OH * s.OW;
      for (int64_t o = 0; o < s.OH * s.OW; ++o) out[idx[o]] += static_cast<C>(g[o]);
    });
  });
}

void CpuBackend::avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  if (channels_last("avg_pool2d", {&x, &y})) return cpu::avg_pool2d_forward_channels_last(x, y, p, num_threads_);
  const Planes s(x, y);
  dispatch_floating_and_half(x.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (s.count * s.H * s.W > kParallelGrain)
    for (int64_t plane = 0; plane < s.count; ++plane) {
      const T* in = xp + plane * s.H * s.W;
      T* out = yp + plane * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
          C sum = 0;
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + p.kernel_h, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + p.kernel_w, s.W); ++w)
              sum += static_cast<C>(in[h * s.W + w]);
          out[oh * s.OW + ow] = static_cast<T>(sum / static_cast<C>(avg_divisor(h0, w0, p, s.H, s.W)));
        }
      }
    }
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) {
  if (channels_last("avg_pool2d_backward", {&dy, &dx}))
    return cpu::avg_pool2d_backward_channels_last(dy, dx, p, num_threads_);
  const Planes s(dx, dy);
  dispatch_floating_and_half(dy.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    T* dxp = dx.data<T>();
    for_each_dx_plane(s, num_threads_, dxp, [&](int64_t plane, auto* out) {
      const T* g = gp + plane * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t h0 = oh * p.stride_h - p.pad_h, w0 = ow * p.stride_w - p.pad_w;
          const C share = static_cast<C>(g[oh * s.OW + ow]) / static_cast<C>(avg_divisor(h0, w0, p, s.H, s.W));
          for (int64_t h = std::max<int64_t>(h0, 0); h < std::min(h0 + p.kernel_h, s.H); ++h)
            for (int64_t w = std::max<int64_t>(w0, 0); w < std::min(w0 + p.kernel_w, s.W); ++w)
              out[h * s.W + w] += share;
        }
      }
    });
  });
}

void CpuBackend::adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  if (channels_last("adaptive_avg_pool2d", {&x, &y}))
    return cpu::adaptive_avg_pool2d_forward_channels_last(x, y, num_threads_);
  const Planes s(x, y);
  dispatch_floating_and_half(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for num_threads(num_threads_) schedule(static) if (s.count * s.H * s.W > kParallelGrain)
    for (int64_t plane = 0; plane < s.count; ++plane) {
      const T* in = xp + plane * s.H * s.W;
      T* out = yp + plane * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, s.H, s.OH), h1 = adaptive_end(oh, s.H, s.OH);
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, s.W, s.OW), w1 = adaptive_end(ow, s.W, s.OW);
          C sum = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) sum += static_cast<C>(in[h * s.W + w]);
          out[oh * s.OW + ow] = static_cast<T>(sum / static_cast<C>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  if (channels_last("adaptive_avg_pool2d_backward", {&dy, &dx}))
    return cpu::adaptive_avg_pool2d_backward_channels_last(dy, dx, num_threads_);
  const Planes s(dx, dy);
  dispatch_floating_and_half(dy.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const T* gp = dy.data<T>();
    T* dxp = dx.data<T>();
    for_each_dx_plane(s, num_threads_, dxp, [&](int64_t plane, auto* out) {
      const T* g = gp + plane * s.OH * s.OW;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        const int64_t h0 = adaptive_start(oh, s.H, s.OH), h1 = adaptive_end(oh, s.H, s.OH);
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t w0 = adaptive_start(ow, s.W, s.OW), w1 = adaptive_end(ow, s.W, s.OW);
          const C share = static_cast<C>(g[oh * s.OW + ow]) / static_cast<C>((h1 - h0) * (w1 - w0));
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) out[h * s.W + w] += share;
        }
      }
    });
  });
}

}  // namespace dp
