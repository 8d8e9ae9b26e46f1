// A seeded random-number stream. Counter-based (Philox-4x32-10): a draw of n numbers reserves
// counters [offset, offset + n), so results do not depend on thread count or device, and the
// state to save for a resume is two integers.
//
// NOTE [ Random numbers in CUDA graphs ]
// A replayed CUDA graph launches its kernels with the arguments they were captured with, so a
// counter passed by value would give every replay the same numbers (the same dropout masks every
// step). While a step is captured, the generator runs relative to a device-resident base
// (begin_relative): reserve() hands out counters counted from 0 at the capture's start, and the
// random kernels add base[0] (Backend::random's offset_base) to them. Before each replay the
// caller writes the generator's offset into the base and advances the generator by the counters
// the captured step draws (end_relative's count): replay k then draws exactly the numbers eager
// step k would have drawn, and a run with graphs keeps the random stream of a run without.
#pragma once

#include <cstdint>

#include "runtime/tensor/philox.h"
#include "runtime/tensor/tensor.h"

namespace dp {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    DP_CHECK(!offset_base_.defined(), "Generator::set_state during a relative (captured) stretch");
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n counters and returns the first (relative to offset_base()[0] while it is defined).
  uint64_t reserve(uint64_t n) {
    uint64_t start = offset_;
    offset_ += n;
    return start;
  }

  // NOTE [ Random numbers in CUDA graphs ]: from here to end_relative(), counters are relative to
  // base[0] (an int64 tensor of one element on the device the draws run on).
  void begin_relative(Tensor base) {
    DP_CHECK(!offset_base_.defined(), "Generator::begin_relative: already relative");
    DP_CHECK(base.defined() && base.dtype() == kInt64 && base.numel() == 1,
             "Generator::begin_relative: the base must be one int64, got ", base.defined() ? base.str() : "undefined");
    offset_base_ = std::move(base);
    saved_offset_ = offset_;
    offset_ = 0;
  }
  // Back to absolute counters where begin_relative left them; returns the counters drawn since.
  uint64_t end_relative() {
    DP_CHECK(offset_base_.defined(), "Generator::end_relative without begin_relative");
    const uint64_t drawn = offset_;
    offset_ = saved_offset_;
    offset_base_ = Tensor();
    return drawn;
  }
  // The device-resident base the counters are relative to; undefined when they are absolute.
  const Tensor& offset_base() const { return offset_base_; }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  Tensor offset_base_;
  uint64_t saved_offset_ = 0;
};

}  // namespace dp
