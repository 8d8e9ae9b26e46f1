#include "runtime/core/splitmix64.h"

#include "runtime/core/error.h"

namespace dp {

uint64_t SplitMix64::key(uint64_t a, uint64_t b, uint64_t c) {
  // Each component goes through the full mixer before the next is added, with a distinct odd
  // offset per position, so (a, b, c) and permutations of it give different keys.
  uint64_t k = mix(a + 0x9E3779B97F4A7C15ull);
  k = mix(k ^ (b + 0xD1B54A32D192ED03ull));
  k = mix(k ^ (c + 0x8CB92BA72F3D8DD7ull));
  return k;
}

uint64_t SplitMix64::below(uint64_t n) {
  DP_ASSERT(n > 0);
  // Lemire, "Fast random integer generation in an interval" (2019).
  __uint128_t m = static_cast<__uint128_t>(next()) * n;
  auto low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      m = static_cast<__uint128_t>(next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace dp
