#include "runtime/ops/elementwise.h"

#include "runtime/autograd/autocast.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/kernel_view.h"
#include "runtime/ops/reduce.h"

namespace dp {

namespace {

// NOTE [ Channels-last ] for pointwise ops: the result of a 4-D op is channels-last when an
// operand of the result's shape suggests channels-last (PyTorch's TensorIterator takes the
// output's layout from its inputs the same way). The kernel then sees every operand permuted to
// [N, H, W, C] — where the result is contiguous, as the kernels' contract asks, and operands of
// the same layout are contiguous too (the kernels' flat fast path).
MemoryFormat result_format(const Shape& shape, std::initializer_list<const Tensor*> operands) {
  if (shape.size() != 4) return MemoryFormat::Contiguous;
  for (const Tensor* t : operands)
    if (t->shape() == shape && t->suggest_memory_format() == MemoryFormat::ChannelsLast)
      return MemoryFormat::ChannelsLast;
  return MemoryFormat::Contiguous;
}

// out = a op b with broadcasting; inputs are expanded (stride-0 views), never copied.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_same_device(name, a, b);
  check_floating(name, a);
  DP_CHECK(a.dtype() == b.dtype(), name, ": dtype mismatch (", a.str(), " and ", b.str(), ")");
  Shape shape = a.shape() == b.shape() ? a.shape() : broadcast_shapes(a.shape(), b.shape(), name);
  const MemoryFormat format = result_format(shape, {&a, &b});
  Tensor out = Tensor::empty(shape, a.dtype(), a.device(), format);
  Tensor ae = a.shape() == shape ? a.detach() : a.detach().expand(shape);
  Tensor be = b.shape() == shape ? b.detach() : b.detach().expand(shape);
  a.device().backend().binary(op, kernel_view(ae, format), kernel_view(be, format), kernel_view(out, format));
  return out;
}

// PyTorch's type promotion for two floating operands: the wider dtype, and float32 for float16
// with bfloat16 (neither holds the other). The casts are differentiable, so each operand's
// gradient comes back in its own dtype. Integer operands are left to the dtype check.
DType promoted_dtype(DType a, DType b) {
  if (a == kFloat64 || b == kFloat64) return kFloat64;
  return kFloat32;  // a ≠ b, both among float32, float16, bfloat16
}

struct Operands {
  Tensor a, b;
};
Operands promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype() || !is_floating(a.dtype()) || !is_floating(b.dtype()))
    return {a, b};
  const DType t = promoted_dtype(a.dtype(), b.dtype());
  return {a.to(t), b.to(t)};
}

Tensor reduce_grad(const Tensor& g, const Shape& shape) {
  return g.shape() == shape ? g : sum_to(g, shape);
}

}  // namespace

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  const Operands ops = promoted(a_in, b_in);
  const Tensor &a = ops.a, &b = ops.b;
  Tensor out = binary_forward(BinaryOp::Add, a, b);
  Shape as = a.shape(), bs = b.shape();
  record("add", out, {a, b}, [as, bs](const Tensor& g, const Node& n) {
    return std::vector<Tensor>{n.needs_input_grad(0) ? reduce_grad(g, as) : Tensor(),
                               n.needs_input_grad(1) ? reduce_grad(g, bs) : Tensor()};
  });
  return out;
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  const Operands ops = promoted(a_in, b_in);
  const Tensor &a = ops.a, &b = ops.b;
  Tensor out = binary_forward(BinaryOp::Sub, a, b);
  Shape as = a.shape(), bs = b.shape();
  record("sub", out, {a, b}, [as, bs](const Tensor& g, const Node& n) {
    return std::vector<Tensor>{n.needs_input_grad(0) ? reduce_grad(g, as) : Tensor(),
                               n.needs_input_grad(1) ? reduce_grad(neg(g), bs) : Tensor()};
  });
  return out;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  const Operands ops = promoted(a_in, b_in);
  const Tensor &a = ops.a, &b = ops.b;
  Tensor out = binary_forward(BinaryOp::Mul, a, b);
  SavedTensor sa = any_requires_grad({&b}) ? SavedTensor(a) : SavedTensor();
  SavedTensor sb = any_requires_grad({&a}) ? SavedTensor(b) : SavedTensor();
  Shape as = a.shape(), bs = b.shape();
  record("mul", out, {a, b}, [sa, sb, as, bs](const Tensor& g, const Node& n) {
    return std::vector<Tensor>{n.needs_input_grad(0) ? reduce_grad(mul(g, sb.get("mul")), as) : Tensor(),
                               n.needs_input_grad(1) ? reduce_grad(mul(g, sa.get("mul")), bs) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a_in, const Tensor& b_in) {
  const Operands ops = promoted(a_in, b_in);
  const Tensor &a = ops.a, &b = ops.b;
  Tensor out = binary_forward(BinaryOp::Div, a, b);
  SavedTensor sb(b), sout = any_requires_grad({&b}) ? SavedTensor(out) : SavedTensor();
  Shape as = a.shape(), bs = b.shape();
  record("div", out, {a, b}, [sb, sout, as, bs](const Tensor& g, const Node& n) {
    Tensor b = sb.get("div");
    Tensor ga = n.needs_input_grad(0) ? reduce_grad(div(g, b), as) : Tensor();
    // d(a/b)/db = -(a/b)/b
    Tensor gb = n.needs_input_grad(1) ? reduce_grad(neg(div(mul(g, sout.get("div")), b)), bs) : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

Tensor equal(const Tensor& a, const Tensor& b) {
  const Operands ops = promoted(a, b);
  return binary_forward(BinaryOp::Equal, ops.a, ops.b);
}

namespace {
Tensor scalar_forward(BinaryOp op, const Tensor& a, double s) {
  check_floating(binary_op_name(op), a);
  const MemoryFormat format = result_format(a.shape(), {&a});
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device(), format);
  a.device().backend().binary_scalar(op, kernel_view(a, format), s, kernel_view(out, format));
  return out;
}
}  // namespace

Tensor add(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Add, a, s);
  record("add_scalar", out, {a}, [](const Tensor& g, const Node&) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  Tensor out = scalar_forward(BinaryOp::Mul, a, s);
  record("mul_scalar", out, {a}, [s](const Tensor& g, const Node&) { return std::vector<Tensor>{mul(g, s)}; });
  return out;
}

Tensor pow(const Tensor& a_in, double exponent) {
  const Tensor a = autocast_input(AutocastOp::Pow, a_in);
  Tensor out = scalar_forward(BinaryOp::Pow, a, exponent);
  SavedTensor sa(a);
  record("pow", out, {a}, [sa, exponent](const Tensor& g, const Node&) {
    Tensor a = sa.get("pow");
    return std::vector<Tensor>{mul(g, mul(pow(a, exponent - 1.0), exponent))};
  });
  return out;
}

Tensor unary_op(UnaryOp op, const Tensor& x) {
  const char* name = unary_op_name(op);
  check_floating(name, x);
  const MemoryFormat format = result_format(x.shape(), {&x});
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device(), format);
  x.device().backend().unary(op, kernel_view(x, format), kernel_view(y, format));
  if (any_requires_grad({&x})) {
    SavedTensor sx(x.contiguous(format)), sy(y);
    record(name, y, {x}, [op, name, sx, sy, format](const Tensor& g, const Node&) {
      // x, y, dy, dx in the forward's format; the kernel sees them contiguous (kernel_view)
      Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device(), format);
      g.device().backend().unary_backward(op, kernel_view(sx.get(name), format), kernel_view(sy.get(name), format),
                                          kernel_view(g.contiguous(format), format), kernel_view(dx, format));
      return std::vector<Tensor>{dx};
    });
  }
  return y;
}

Tensor neg(const Tensor& x) { return unary_op(UnaryOp::Neg, x); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::Exp, autocast_input(AutocastOp::Exp, x)); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::Log, autocast_input(AutocastOp::Log, x)); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op(UnaryOp::Rsqrt, autocast_input(AutocastOp::Rsqrt, x)); }
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::Abs, x); }
Tensor square(const Tensor& x) { return unary_op(UnaryOp::Square, x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::Relu, x); }
Tensor gelu(const Tensor& x) { return unary_op(UnaryOp::Gelu, x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::Sigmoid, x); }
Tensor silu(const Tensor& x) { return unary_op(UnaryOp::Silu, x); }

}  // namespace dp
