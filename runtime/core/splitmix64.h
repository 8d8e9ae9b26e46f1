// SplitMix64 (Steele, Lea and Flood, 2014): a counter-based generator — the k-th number of a
// stream is a fixed mix of state + k · the golden ratio, so a stream is a pure function of its
// key, the same on every machine. The data pipeline's random numbers (token sequences, MLM
// masking, image augmentation, sample order) all come from it.
#pragma once

#include <cstdint>

namespace dp {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t key) : state_(key) {}
  // The key for the stream of (a, b, c), each mixed in turn, so nearby tuples give unrelated
  // streams.
  static uint64_t key(uint64_t a, uint64_t b = 0, uint64_t c = 0);
  // The finaliser: a bijection of 64-bit words.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t next() { return mix(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, n), n > 0, without modulo bias (Lemire's multiply-shift with rejection).
  uint64_t below(uint64_t n);
  // Uniform in [lo, hi], inclusive (Python's random.randint).
  int64_t between(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo) + 1)); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

}  // namespace dp
