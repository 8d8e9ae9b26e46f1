#include "runtime/ops/attention.h"

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"

namespace dp {

Tensor attention_softmax(const Tensor& scores, const Tensor& mask, double scale) {
  constexpr const char* op = "attention_softmax";
  check_floating(op, scores);
  DP_CHECK(scores.dim() == 4, op, ": expected scores [batch, heads, queries, keys], got ", scores.str());
  const int64_t b = scores.size(0), h = scores.size(1), sq = scores.size(2), sk = scores.size(3);
  Tensor mask_rows;  // contiguous float32 [1 or B, 1 or Sq, Sk]
  if (mask.defined()) {
    check_floating(op, mask);
    DP_CHECK(mask.device() == scores.device(), op, ": the mask is on ", mask.device().str(), ", the scores on ",
             scores.device().str());
    DP_CHECK(mask.dim() == 4 && (mask.size(0) == b || mask.size(0) == 1) && mask.size(1) == 1 &&
                 (mask.size(2) == 1 || mask.size(2) == sq) && mask.size(3) == sk,
             op, ": the mask must be [", b, " or 1, 1, 1 or ", sq, ", ", sk, "], got ", mask.str());
    DP_CHECK(!(GradMode::enabled() && mask.requires_grad()), op,
             ": the mask gets no gradient; pass it detached");
    NoGradGuard no_grad;
    mask_rows = mask.detach().to(kFloat32).contiguous().reshape({mask.size(0), mask.size(2), sk});
  }
  const Tensor x = scores.detach().contiguous();
  Tensor y = Tensor::empty({b, h, sq, sk}, scores.dtype(), scores.device());
  if (y.numel() > 0) scores.device().backend().attention_softmax_forward(x.view({b, h * sq, sk}), mask_rows,
                                                                          y.view({b, h * sq, sk}), scale);
  if (any_requires_grad({&scores})) {
    SavedTensor saved(y);
    record(op, y, {scores}, [saved, scale](const Tensor& g, const Node&) {
      const Tensor probs = saved.get("attention_softmax");
      const Tensor gc = g.contiguous();
      Tensor dx = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
      if (probs.numel() > 0) {
        const Shape rows{probs.numel() / probs.size(3), probs.size(3)};
        probs.device().backend().attention_softmax_backward(probs.view(rows), gc.view(rows), dx.view(rows), scale);
      }
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

}  // namespace dp
