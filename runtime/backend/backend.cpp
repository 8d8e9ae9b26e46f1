#include "runtime/backend/backend.h"

namespace dp {

const char* unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg: return "neg";
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Log: return "log";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "abs";
    case UnaryOp::Square: return "square";
    case UnaryOp::Reciprocal: return "reciprocal";
    case UnaryOp::Relu: return "relu";
    case UnaryOp::Gelu: return "gelu";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Sigmoid: return "sigmoid";
    case UnaryOp::Silu: return "silu";
  }
  return "?";
}

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
    case BinaryOp::Maximum: return "maximum";
    case BinaryOp::Minimum: return "minimum";
    case BinaryOp::Pow: return "pow";
    case BinaryOp::Equal: return "equal";
  }
  return "?";
}

void Backend::unsupported(const char* op) const {
  throw Error(detail::concat(op, ": no ", device_type() == DeviceType::CPU ? "CPU" : "CUDA",
                             " kernel yet (device ", Device(const_cast<Backend*>(this)).str(), ")"));
}

}  // namespace dp
