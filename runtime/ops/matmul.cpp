#include "runtime/ops/matmul.h"

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/reduce.h"

namespace dp {

namespace {

// GEMM operands need a unit stride in one of their last two dims; anything else is copied.
Tensor gemm_operand(const Tensor& t) {
  int64_t n = t.dim();
  const Shape& st = t.strides();
  const Shape& sz = t.shape();
  bool row_major = st[n - 1] == 1 || sz[n - 1] == 1;
  bool col_major = st[n - 2] == 1 || sz[n - 2] == 1;
  return row_major || col_major ? t : t.contiguous();
}

// c = a @ b for 2-D or 3-D operands that already have compatible shapes; into `out` when it is
// given (contiguous, the product's shape and dtype).
Tensor gemm_forward(const Tensor& a, const Tensor& b, const char* op, const Tensor& out = Tensor()) {
  check_same_device(op, a, b);
  check_floating(op, a);
  DP_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch (", a.str(), " and ", b.str(), ")");
  DP_CHECK(a.dim() >= 2 && a.dim() <= 3 && b.dim() >= 2 && b.dim() <= 3, op,
           ": expected 2-D or 3-D operands, got ", a.str(), " and ", b.str());
  int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  DP_CHECK(b.size(-2) == K, op, ": inner dimensions differ: ", a.str(), " @ ", b.str());
  int64_t batch = a.dim() == 3 ? a.size(0) : (b.dim() == 3 ? b.size(0) : 0);
  if (a.dim() == 3 && b.dim() == 3)
    DP_CHECK(a.size(0) == b.size(0), op, ": batch sizes differ: ", a.str(), " @ ", b.str());
  Tensor a3 = gemm_operand(a.detach()), b3 = gemm_operand(b.detach());
  if (batch) {
    if (a3.dim() == 2) a3 = a3.unsqueeze(0).expand({batch, M, K});
    if (b3.dim() == 2) b3 = b3.unsqueeze(0).expand({batch, K, N});
  }
  const Shape c_shape = batch ? Shape{batch, M, N} : Shape{M, N};
  Tensor c = out.defined() ? out : Tensor::empty(c_shape, a.dtype(), a.device());
  DP_ASSERT(c.shape() == c_shape && c.dtype() == a.dtype() && c.is_contiguous());
  a.device().backend().gemm(a3, b3, c, 1.0, 0.0);
  return c;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Under autocast both run in the low-precision dtype (NOTE [ Autocast policy ]).
  const Tensor a = autocast_input(AutocastOp::Matmul, a_in), b = autocast_input(AutocastOp::Matmul, b_in);
  Tensor c = gemm_forward(a, b, "matmul");
  if (any_requires_grad({&a, &b})) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    Shape as = a.shape(), bs = b.shape();
    record("matmul", c, {a, b}, [sa, sb, as, bs](const Tensor& g, const Node& n) {
      // dA = dC @ Bᵀ, dB = Aᵀ @ dC; a broadcast 2-D operand sums over the batch.
      Tensor ga, gb;
      if (n.needs_input_grad(0)) ga = sum_to(matmul(g, sb.get("matmul").transpose(-1, -2)), as);
      if (n.needs_input_grad(1)) gb = sum_to(matmul(sa.get("matmul").transpose(-1, -2), g), bs);
      return std::vector<Tensor>{ga, gb};
    });
  }
  return c;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  // Under autocast the three run in the low-precision dtype (NOTE [ Autocast policy ]).
  const Tensor x = autocast_input(AutocastOp::Linear, x_in);
  const Tensor weight = autocast_input(AutocastOp::Linear, weight_in);
  const Tensor bias = autocast_input(AutocastOp::Linear, bias_in);
  check_same_device("linear", x, weight);
  check_floating("linear", x);
  DP_CHECK(x.dtype() == weight.dtype(), "linear: input ", x.str(), " and weight ", weight.str(),
           " have different dtypes");
  DP_CHECK(weight.dim() == 2, "linear: weight must be [out_features, in_features], got ", weight.str());
  DP_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input ", x.str(),
           " does not match weight ", weight.str(), " (expected last dim ", weight.size(1), ")");
  const int64_t out_features = weight.size(0), in_features = weight.size(1);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor x2 = x.detach().reshape({-1, in_features});
  Tensor y = Tensor::empty({x2.size(0), out_features}, x.dtype(), x.device());
  Backend& be = x.device().backend();
  if (bias.defined()) {
    DP_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias ", bias.str(),
             " does not match ", out_features, " output features");
    check_same_device("linear", x, bias);
    DP_CHECK(bias.dtype() == x.dtype(), "linear: bias ", bias.str(), " and input ", x.str(), " have different dtypes");
    // Fused bias: start C from the broadcast bias and accumulate the product onto it (beta = 1).
    be.copy(bias.detach().unsqueeze(0).expand(y.shape()), y);
    be.gemm(gemm_operand(x2), weight.detach().t(), y, 1.0, 1.0);
  } else {
    be.gemm(gemm_operand(x2), weight.detach().t(), y, 1.0, 0.0);
  }
  Tensor out = y.view(out_shape);
  if (any_requires_grad({&x, &weight, &bias})) {
    SavedTensor sx = weight.requires_grad() ? SavedTensor(x2) : SavedTensor();
    SavedTensor sw = x.requires_grad() ? SavedTensor(weight) : SavedTensor();
    Shape x_shape = x.shape();
    record("linear", out, {x, weight, bias}, [sx, sw, x_shape, out_features](const Tensor& g, const Node& n) {
      Tensor g2 = g.reshape({-1, out_features});
      Tensor gx, gw, gb;
      if (n.needs_input_grad(0)) {  // [B,out]@[out,in]
        const Tensor w = sw.get("linear");
        // Into the gradient already waiting for x when there is one (NOTE [ Summing into a
        // pending gradient ]: a residual's, or another projection's of the same hidden states).
        gx = w.dtype() == g2.dtype() ? n.pending_sum(0, x_shape, g2.dtype(), g2.device()) : Tensor();
        if (gx.defined()) {
          g2.device().backend().gemm(gemm_operand(g2), gemm_operand(w), gx.view({-1, w.size(1)}), 1.0, 1.0);
        } else {
          gx = matmul(g2, w).reshape(x_shape);
        }
      }
      if (n.needs_input_grad(1)) {  // [out,B]@[B,in], into the weight's home when offered
        const Tensor x2 = sx.get("linear");
        gw = gemm_forward(g2.t(), x2, "linear", n.grad_buffer(1, {out_features, x2.size(1)}, g2.dtype(), g2.device()));
      }
      if (n.needs_input_grad(2)) gb = sum(g2, {0});
      return std::vector<Tensor>{gx, gw, gb};
    });
  }
  return out;
}

}  // namespace dp
