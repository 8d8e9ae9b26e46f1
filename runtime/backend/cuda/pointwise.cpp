// Front-ends of the CUDA pointwise kernels (pointwise.cu): unary ops and their gradients,
// binary ops over broadcast views, binary ops with a scalar, axpby. Semantics are the CPU
// backend's (cpu/pointwise.cpp); every floating dtype.
#include <array>
#include <cstdint>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/pointwise_kernels.h"
#include "runtime/backend/cuda/strided_shape.h"

namespace dp::cuda {

namespace {

UnaryKind unary_kind(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return UnaryKind::Neg;
    case UnaryOp::Exp: return UnaryKind::Exp;
    case UnaryOp::Log: return UnaryKind::Log;
    case UnaryOp::Sqrt: return UnaryKind::Sqrt;
    case UnaryOp::Rsqrt: return UnaryKind::Rsqrt;
    case UnaryOp::Abs: return UnaryKind::Abs;
    case UnaryOp::Square: return UnaryKind::Square;
    case UnaryOp::Reciprocal: return UnaryKind::Reciprocal;
    case UnaryOp::Relu: return UnaryKind::Relu;
    case UnaryOp::Gelu: return UnaryKind::Gelu;
    case UnaryOp::Tanh: return UnaryKind::Tanh;
    case UnaryOp::Sigmoid: return UnaryKind::Sigmoid;
    case UnaryOp::Silu: return UnaryKind::Silu;
  }
  throw Error("unknown unary op");
}

BinaryKind binary_kind(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return BinaryKind::Add;
    case BinaryOp::Sub: return BinaryKind::Sub;
    case BinaryOp::Mul: return BinaryKind::Mul;
    case BinaryOp::Div: return BinaryKind::Div;
    case BinaryOp::Maximum: return BinaryKind::Maximum;
    case BinaryOp::Minimum: return BinaryKind::Minimum;
    case BinaryOp::Pow: return BinaryKind::Pow;
    case BinaryOp::Equal: return BinaryKind::Equal;
  }
  throw Error("unknown binary op");
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& y) {
  const char* name = unary_op_name(op);
  check_operand(name, x);
  check_operand(name, y);
  check_supported(Kernel::Unary, x.dtype());
  DP_CHECK(x.dtype() == y.dtype() && x.shape() == y.shape() && y.is_contiguous(), name,
           ": expects a contiguous output of the input's shape and dtype, got ", x.str(), " → ", y.str());
  if (x.numel() == 0) return;
  activate();
  const StridedShape<2> shape = make_strided_shape<2>(name, y.shape(), {&y.strides(), &x.strides()});
  DP_CUDA_CHECK(device_, launch_unary(unary_kind(op), x.raw_data(), y.raw_data(), x.dtype(), shape, x.numel(), stream_),
                name, " ", x.str());
}

void CudaBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const char* name = unary_op_name(op);
  const UnaryKind kind = unary_kind(op);
  const bool reads_x = unary_backward_reads_x(kind), reads_y = unary_backward_reads_y(kind);
  check_operand(name, dy);
  check_operand(name, dx);
  check_supported(Kernel::UnaryBackward, dx.dtype());
  DP_CHECK(dy.dtype() == dx.dtype() && dy.shape() == dx.shape() && dy.is_contiguous() && dx.is_contiguous(), name,
           " backward: expects contiguous dy and dx of one shape and dtype, got ", dy.str(), " and ", dx.str());
  // x and y are checked (and read) only where the op's derivative uses them, as the CPU kernel.
  for (const Tensor* t : {reads_x ? &x : nullptr, reads_y ? &y : nullptr}) {
    if (t == nullptr) continue;
    DP_CHECK(t->defined(), name, " backward: needs ", t == &x ? "x" : "y", ", got an undefined tensor");
    check_operand(name, *t);
    DP_CHECK(t->dtype() == dx.dtype() && t->shape() == dx.shape() && t->is_contiguous(), name,
             " backward: expects contiguous operands of one shape and dtype, got ", t->str(), " and ", dx.str());
  }
  if (dx.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_unary_backward(kind, reads_x ? x.raw_data() : nullptr, reads_y ? y.raw_data() : nullptr,
                                      dy.raw_data(), dx.raw_data(), dx.dtype(), dx.numel(), stream_),
                name, " backward ", dy.str());
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = binary_op_name(op);
  check_operand(name, a);
  check_operand(name, b);
  check_operand(name, out);
  check_supported(Kernel::Binary, out.dtype());
  DP_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(), name, ": operands of one dtype expected, got ",
           a.str(), ", ", b.str(), " → ", out.str());
  DP_CHECK(a.shape() == out.shape() && b.shape() == out.shape() && out.is_contiguous(), name,
           ": expects operands expanded to a contiguous output's shape, got ", a.str(), ", ", b.str(), " → ",
           out.str());
  if (out.numel() == 0) return;
  activate();
  const StridedShape<3> shape =
      make_strided_shape<3>(name, out.shape(), {&out.strides(), &a.strides(), &b.strides()});
  DP_CUDA_CHECK(device_,
                launch_binary(binary_kind(op), a.raw_data(), b.raw_data(), out.raw_data(), out.dtype(), shape,
                              out.numel(), stream_),
                name, " ", a.str(), ", ", b.str());
}

void CudaBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  const char* name = binary_op_name(op);
  check_operand(name, a);
  check_operand(name, out);
  check_supported(Kernel::BinaryScalar, out.dtype());
  DP_CHECK(a.dtype() == out.dtype() && a.shape() == out.shape() && out.is_contiguous(), name,
           " (scalar): expects a contiguous output of the input's shape and dtype, got ", a.str(), " → ", out.str());
  if (out.numel() == 0) return;
  activate();
  const StridedShape<2> shape = make_strided_shape<2>(name, out.shape(), {&out.strides(), &a.strides()});
  DP_CUDA_CHECK(device_,
                launch_binary_scalar(binary_kind(op), a.raw_data(), s, out.raw_data(), out.dtype(), shape,
                                     out.numel(), stream_),
                name, " ", a.str(), " with scalar ", s);
}

void CudaBackend::axpby(double alpha, const Tensor& x, double beta, const Tensor& y) {
  check_operand("axpby", x);
  check_operand("axpby", y);
  check_supported(Kernel::Axpby, y.dtype());
  DP_CHECK(x.dtype() == y.dtype() && x.numel() == y.numel() && x.is_contiguous() && y.is_contiguous(),
           "axpby: expects contiguous x and y of one size and dtype, got ", x.str(), " and ", y.str());
  if (y.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_, launch_axpby(alpha, x.raw_data(), beta, y.raw_data(), y.dtype(), y.numel(), stream_),
                "axpby ", x.str(), " → ", y.str());
}

}  // namespace dp::cuda
