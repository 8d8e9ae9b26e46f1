#include "runtime/ops/loss.h"

#include <algorithm>

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/reduce.h"

namespace dp {

namespace {

// The permutation that moves `dim` last, keeping the other dims in order, and its inverse.
struct MoveDimLast {
  Shape forward, inverse;
  MoveDimLast(int64_t dim, int64_t ndim) : inverse(ndim) {
    for (int64_t d = 0; d < ndim; ++d)
      if (d != dim) forward.push_back(d);
    forward.push_back(dim);
    for (int64_t i = 0; i < ndim; ++i) inverse[forward[i]] = i;
  }
};

// x any shape; the kernel works on contiguous rows [M, N] with N = x.size(dim), so a dim other
// than the last is moved last (one copy) and the result is returned as a view in x's layout.
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_floating(op, x);
  DP_CHECK(x.dim() >= 1, op, ": expected at least a 1-D input, got ", x.str());
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const bool is_last = d == x.dim() - 1;
  const MoveDimLast perm(d, x.dim());
  Tensor xt = is_last ? x.detach().contiguous() : x.detach().permute(perm.forward).contiguous();
  const int64_t N = x.size(d);
  const Shape rows{N > 0 ? x.numel() / N : 0, N};
  Tensor y = Tensor::empty(xt.shape(), x.dtype(), x.device());
  if (x.numel() > 0) x.device().backend().softmax_forward(xt.view(rows), y.view(rows), log);
  Tensor out = is_last ? y : y.permute(perm.inverse);

  if (any_requires_grad({&x})) {
    SavedTensor sy(y);
    record(op, out, {x}, [sy, op, is_last, perm, rows, log](const Tensor& g, const Node&) {
      // g, dx [*, N] in the moved layout; returned in x's layout.
      Tensor y = sy.get(op);
      Tensor gt = (is_last ? g : g.permute(perm.forward)).contiguous();
      Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
      if (y.numel() > 0) y.device().backend().softmax_backward(y.view(rows), gt.view(rows), dx.view(rows), log);
      return std::vector<Tensor>{is_last ? dx : dx.permute(perm.inverse)};
    });
  }
  return out;
}

// Σ of a 1-D tensor as a 0-d tensor, by one backend reduction (not recorded).
Tensor sum_0d(const Tensor& v) {
  Tensor total = Tensor::empty({1}, v.dtype(), v.device());
  v.device().backend().reduce(ReduceOp::Sum, v, total);
  return total.view({});
}

// The number of targets that are not ignore_index, as a 0-d tensor of `dtype`, computed on the
// target's device (no host synchronisation). Compared in float64, which is exact for any
// realistic class index.
Tensor count_valid_targets(const Tensor& target, int64_t ignore_index, DType dtype) {
  NoGradGuard no_grad;
  Backend& backend = target.device().backend();
  const int64_t M = target.numel();
  Tensor target_f64 = Tensor::empty({M}, kFloat64, target.device());
  backend.copy(target, target_f64);
  Tensor ignored = Tensor::empty({M}, kFloat64, target.device());
  backend.binary_scalar(BinaryOp::Equal, target_f64, static_cast<double>(ignore_index), ignored);
  return add(neg(sum_0d(ignored)), static_cast<double>(M)).to(dtype);
}

}  // namespace

// Under autocast both run in float32 (NOTE [ Autocast policy ]).
Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(autocast_input(AutocastOp::Softmax, x), dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(autocast_input(AutocastOp::LogSoftmax, x), dim, true);
}

// logits [N, C], target int64 [N] → loss 0-d (mean, sum) or [N] (none). The fused kernel writes
// log_probs [N, C] (saved for backward) and per-sample losses [N]; the reduction runs on the
// device. Mean over zero counted targets is NaN, as PyTorch.
Tensor cross_entropy(const Tensor& logits_in, const Tensor& target, Reduction reduction, int64_t ignore_index,
                     double label_smoothing) {
  constexpr const char* op = "cross_entropy";
  const Tensor logits = autocast_input(AutocastOp::CrossEntropy, logits_in);  // float32 under autocast
  check_floating(op, logits);
  check_same_device(op, logits, target);
  DP_CHECK(logits.dim() == 2 && logits.size(1) >= 1, op, ": expected logits [N, C] with C >= 1, got ",
           logits.str());
  DP_CHECK(target.dtype() == kInt64, op, ": target must hold int64 class indices, got ", target.str());
  DP_CHECK(target.dim() == 1 && target.size(0) == logits.size(0), op, ": target ", target.str(),
           " must be [N] for logits ", logits.str());
  DP_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
           label_smoothing);
  const int64_t M = logits.size(0), C = logits.size(1);
  Backend& backend = logits.device().backend();
  Tensor logits_c = logits.detach().contiguous();
  Tensor target_c = target.detach().contiguous();
  Tensor log_probs = Tensor::empty({M, C}, logits.dtype(), logits.device());
  Tensor losses = Tensor::empty({M}, logits.dtype(), logits.device());
  backend.cross_entropy_forward(logits_c, target_c, log_probs, losses, ignore_index, label_smoothing);

  Tensor count;  // Mean only
  Tensor out;
  switch (reduction) {
    case Reduction::None: out = losses; break;
    case Reduction::Sum: out = sum_0d(losses); break;
    case Reduction::Mean: {
      count = count_valid_targets(target_c, ignore_index, logits.dtype());
      out = Tensor::empty({}, logits.dtype(), logits.device());
      backend.binary(BinaryOp::Div, sum_0d(losses), count, out);
      break;
    }
  }

  if (any_requires_grad({&logits})) {
    SavedTensor slog_probs(log_probs), starget(target_c), scount(count);
    record(op, out, {logits}, [=](const Tensor& g, const Node&) {
      // g: 0-d (mean, sum) or [N]; dlosses [N]; dlogits [N, C]
      Tensor dlosses;
      if (reduction == Reduction::None) {
        dlosses = g.contiguous();
      } else {  // every sample receives the scalar's gradient (÷ count for mean)
        Tensor per_sample = reduction == Reduction::Mean ? div(g, scount.get(op)) : g;
        dlosses = per_sample.reshape({1}).expand({M}).contiguous();
      }
      Tensor lp = slog_probs.get(op);
      Tensor dlogits = Tensor::empty({M, C}, lp.dtype(), lp.device());
      lp.device().backend().cross_entropy_backward(lp, starget.get(op), dlosses, dlogits, ignore_index,
                                                   label_smoothing);
      return std::vector<Tensor>{dlogits};
    });
  }
  return out;
}

Tensor topk_hits(const Tensor& logits_in, const Tensor& target, int64_t k) {
  DP_CHECK(logits_in.dim() == 2 && target.dim() == 1 && target.size(0) == logits_in.size(0), "topk_hits: logits ",
           shape_str(logits_in.shape()), " and target ", shape_str(target.shape()), " must be [N, C] and [N]");
  DP_CHECK(k >= 1, "topk_hits: k must be at least 1, got ", k);
  NoGradGuard no_grad;
  AutocastGuard full_precision(kFloat32);  // (a comparison: float32 whatever the run's precision)
  const int64_t N = logits_in.size(0), C = logits_in.size(1);
  const Device device = logits_in.device();
  // Composed of existing ops (a gather, pointwise ops, one row sum), so every backend runs it with
  // kernels it already has. The target's rank is the number of classes ordered before it in
  // torch's descending sort: a larger logit, a NaN (NaN sorts first), or an equal logit at a lower
  // class index (as argmax, which takes the first maximum: top-1 hits are argmax's).
  const Tensor logits = logits_in.to(kFloat32);
  const Tensor row_start = mul(arange(0, static_cast<double>(N), 1, kFloat64, device), static_cast<double>(C));
  const Tensor flat_index = add(row_start, target.to(kFloat64)).to(kInt64);
  const Tensor target_logit = embedding(flat_index, logits.reshape({N * C, 1}));  // [N, 1], gathered: exact
  const Tensor zero = zeros({}, kFloat32, device), one = ones({}, kFloat32, device);
  auto is_not = [&](const Tensor& mask) { return sub(one, mask); };
  // a > t as relu(a - t) != 0: the difference of two distinct floats is never 0, and a NaN
  // difference gives relu 0 (not above; NaNs are counted apart).
  const Tensor above = is_not(equal(relu(sub(logits, target_logit)), zero));
  const Tensor nan = is_not(equal(logits, logits));
  const Tensor classes = arange(0, static_cast<double>(C), 1, kFloat32, device).reshape({1, C});
  const Tensor lower_index = is_not(equal(relu(sub(target.to(kFloat32).reshape({N, 1}), classes)), zero));
  const Tensor tied_before = mul(equal(logits, target_logit), lower_index);
  const Tensor before = sum(add(add(above, nan), tied_before), {1});  // [N]
  Tensor hits = zeros({N}, kFloat32, device);
  for (int64_t j = 0; j < std::min(k, C); ++j)
    hits = add(hits, equal(before, full({}, static_cast<double>(j), kFloat32, device)));
  // A NaN target logit is never a hit (it counts itself as before it, but k may exceed that).
  return mul(hits, equal(target_logit.reshape({N}), target_logit.reshape({N})));
}

}  // namespace dp
