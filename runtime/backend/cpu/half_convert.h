// float16/bfloat16 ↔ float32 conversion of whole runs, vectorised (AVX-512, or AVX2 with F16C,
// where the build has it), and blocked loops that let float16/bfloat16 kernels run their float32 inner loop.
//
// NOTE [ Low-precision element-wise kernels on the CPU ]
// Converting one Eigen::half/bfloat16 at a time inside a kernel's loop keeps the loop scalar
// (bfloat16 rounding with its NaN case is a branch), which made a bfloat16 ReLU ~10× slower than
// the float32 one. Instead a kernel widens a block of each input into a float32 buffer on the
// stack, runs the very loop the float32 kernel runs, and narrows the result once: round to
// nearest even, NaN kept (quiet, sign kept) — bit-identical to Eigen's scalar conversions, but
// for float16 NaNs, whose payload F16C keeps where Eigen's software path makes them canonical.
#pragma once

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

namespace dp::cpu {

template <typename T>
inline constexpr bool is_half_type_v = std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>;

// dst[i] = float(src[i]) for i < n.
void widen(const Eigen::bfloat16* src, float* dst, int64_t n);
void widen(const Eigen::half* src, float* dst, int64_t n);
// dst[i] = round_to_nearest_even(src[i]) for i < n.
void narrow(const float* src, Eigen::bfloat16* dst, int64_t n);
void narrow(const float* src, Eigen::half* dst, int64_t n);

// Elements per block: the buffers of a three-input kernel stay in L1.
inline constexpr int64_t kConvertBlock = 512;

// Runs body(out, in, n) over elements [begin, end) of `out` and the same elements of each input,
// in compute_t<T> (see cpu_dispatch.h): float32/float64 data is passed through as is, in one call;
// float16/bfloat16 data goes through float32 blocks (NOTE above). `out` may be one of the inputs.
template <typename T, size_t N, typename Body>
void for_each_block(int64_t begin, int64_t end, T* out, const std::array<const T*, N>& in, Body&& body) {
  if constexpr (!is_half_type_v<T>) {
    std::array<const T*, N> at;
    for (size_t k = 0; k < N; ++k) at[k] = in[k] + begin;
    body(out + begin, at, end - begin);
  } else {
    alignas(64) float in_block[N == 0 ? 1 : N][kConvertBlock];
    alignas(64) float out_block[kConvertBlock];
    for (int64_t s = begin; s < end; s += kConvertBlock) {
      const int64_t n = std::min(kConvertBlock, end - s);
      std::array<const float*, N> at;
      for (size_t k = 0; k < N; ++k) {
        widen(in[k] + s, in_block[k], n);
        at[k] = in_block[k];
      }
      body(out_block, at, n);
      narrow(out_block, out + s, n);
    }
  }
}

}  // namespace dp::cpu
