// NOTE [ Low-precision element-wise kernels on the CPU ] (half_convert.h).
#include "runtime/backend/cpu/half_convert.h"

#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__F16C__))
#include <immintrin.h>
#endif

namespace dp::cpu {

namespace {

// The scalar conversions (Eigen's) finish each run, and are the whole loop without AVX2/AVX-512.
template <typename T>
void widen_scalar(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
template <typename T>
void narrow_scalar(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(src[i]);
}

}  // namespace

void widen(const Eigen::bfloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {  // a bfloat16 is the upper half of its float32
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
#endif
  widen_scalar(src + i, dst + i, n - i);
}

void widen(const Eigen::half* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
#elif defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  widen_scalar(src + i, dst + i, n - i);
}

void narrow(const float* src, Eigen::bfloat16* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512i round_bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
  const __m512i sign = _mm512_set1_epi32(0x8000), quiet_nan = _mm512_set1_epi32(0x7fc0);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(src + i);
    const __m512i bits = _mm512_castps_si512(v);
    // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the upper 16 bits.
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(round_bias, lsb)), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(bits, 16), sign), quiet_nan));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
#elif defined(__AVX2__)
  // The same arithmetic 8 at a time (x86-64-v3 hosts: without it a bfloat16 run spent ~70 % of
  // its time in Eigen's scalar conversion).
  const __m256i round_bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i sign = _mm256_set1_epi32(0x8000), quiet_nan = _mm256_set1_epi32(0x7fc0);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    const __m256i upper = _mm256_srli_epi32(_mm256_castps_si256(v), 16);
    const __m256i lsb = _mm256_and_si256(upper, one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_castps_si256(v), _mm256_add_epi32(round_bias, lsb)), 16);
    const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_and_si256(upper, sign), quiet_nan), nan);
    // Every r < 2^16, so the saturating pack is exact; it packs within 128-bit lanes, and the
    // permute brings lane 1's four results next to lane 0's.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0b1000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
#endif
  narrow_scalar(src + i, dst + i, n - i);
}

void narrow(const float* src, Eigen::half* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
#elif defined(__AVX2__) && defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  narrow_scalar(src + i, dst + i, n - i);
}

}  // namespace dp::cpu
