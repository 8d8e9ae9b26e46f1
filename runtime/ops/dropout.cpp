#include "runtime/ops/dropout.h"

#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/elementwise.h"

namespace dp {

// x any shape → y contiguous, same shape.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  DP_CHECK(p >= 0.0 && p < 1.0, "dropout: p (the probability of zeroing an element) must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  check_floating("dropout", x);
  Backend& backend = x.device().backend();
  const double keep = 1.0 - p;
  // The mask holds 0 or 1/keep, so forward and backward are one multiplication each.
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  const uint64_t n = static_cast<uint64_t>(x.numel());
  // Relative to the generator's device base while a step is captured (NOTE [ Random numbers in
  // CUDA graphs ]).
  backend.random(mask, RandomDist::Bernoulli, keep, 0.0, gen.seed(), gen.reserve(n), gen.offset_base());
  Tensor scaled_mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend.binary_scalar(BinaryOp::Mul, mask, 1.0 / keep, scaled_mask);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend.binary(BinaryOp::Mul, x.detach(), scaled_mask, y);
  if (any_requires_grad({&x})) {
    SavedTensor smask(scaled_mask);
    record("dropout", y, {x}, [smask](const Tensor& g, const Node&) {
      return std::vector<Tensor>{mul(g, smask.get("dropout"))};
    });
  }
  return y;
}

}  // namespace dp
