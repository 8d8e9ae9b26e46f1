// Op harness table: memory kernels (copy, fill, arange, random), unary and binary pointwise ops,
// scalar ops, axpby and dropout (NOTE [ Op harness ] in tests/common/op_harness.h).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/op_harness.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/dropout.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace dp::testing::harness {

namespace {

using V = std::vector<Tensor>;

// out = a op b through the backend (ops without a public differentiable form: maximum, minimum,
// tensor pow, equal), operands expanded to the broadcast shape.
OpFn backend_binary(BinaryOp op) {
  return [op](const V& v) {
    const Shape shape = broadcast_shapes(v[0].shape(), v[1].shape(), "op harness");
    Tensor out = Tensor::empty(shape, v[0].dtype(), v[0].device());
    v[0].device().backend().binary(op, v[0].expand(shape), v[1].expand(shape), out);
    return V{out};
  };
}

OpFn backend_binary_scalar(BinaryOp op, double s) {
  return [op, s](const V& v) {
    Tensor out = Tensor::empty(v[0].shape(), v[0].dtype(), v[0].device());
    v[0].device().backend().binary_scalar(op, v[0], s, out);
    return V{out};
  };
}

struct UnaryInfo {
  UnaryOp op;
  const char* name;
  double low, high;  // the inputs' domain
};

}  // namespace

std::vector<OpCase> pointwise_cases() {
  std::vector<OpCase> cases;
  const double nan = std::numeric_limits<double>::quiet_NaN();

  // ---- Memory: copies (strided, broadcast, casts), fills, arange, random ----
  cases.push_back({"copy_transposed_to_contiguous", {Kernel::Copy}, {InputSpec("x", {7, 5, 33}).transposed()},
                   [](const V& v) { return V{v[0].contiguous()}; }, false});
  cases.push_back({"copy_narrowed_broadcast", {Kernel::Copy}, {InputSpec("x", {1, 33}).narrowed()},
                   [](const V& v) { return V{v[0].expand({7, 33}).contiguous()}; }, false});
  cases.push_back({"copy_cast_roundtrip_float16_bfloat16", {Kernel::Copy}, {InputSpec("x", {3, 257}).range(-4, 4)},
                   [](const V& v) {
                     const DType d = v[0].dtype();
                     return V{v[0].to(kFloat16).to(d), v[0].to(kBFloat16).to(d), v[0].to(kFloat32).to(d)};
                   },
                   false});
  cases.push_back({"copy_cast_to_int", {Kernel::Copy}, {InputSpec("x", {257}).range(-100, 100).transposed()},
                   [](const V& v) { return V{v[0].to(kInt32), v[0].to(kInt64)}; }, false});
  cases.push_back({"fill_narrowed_view", {Kernel::Fill}, {InputSpec("x", {7, 33}).no_grad()},
                   [](const V& v) {
                     Tensor buf = zeros(v[0].shape(), v[0].dtype(), v[0].device());
                     buf.narrow(1, 3, 17).fill_(0.75);
                     return V{buf, full({257}, -2.5, v[0].dtype(), v[0].device())};
                   },
                   false});
  cases.push_back({"arange_257", {Kernel::Arange}, {InputSpec("like", {1}).no_grad()},
                   [](const V& v) {
                     return V{arange(-64, 64.5, 0.5, v[0].dtype(), v[0].device()),
                              arange(3, 0, -1, kInt64, v[0].device())};
                   },
                   false});
  for (const auto& [dist, name] : {std::pair{RandomDist::Uniform, "random_uniform_1031"},
                                   std::pair{RandomDist::Normal, "random_normal_1031"},
                                   std::pair{RandomDist::Bernoulli, "random_bernoulli_1031"}}) {
    const RandomDist d = dist;
    cases.push_back({name, {Kernel::Random}, {InputSpec("like", {1}).no_grad()},
                     [d](const V& v) {
                       Tensor out = Tensor::empty({1031}, v[0].dtype(), v[0].device());
                       const double a = d == RandomDist::Bernoulli ? 0.3 : -1.5, b = 2.0;
                       v[0].device().backend().random(out, d, a, b, 1234, 77);
                       return V{out};
                     },
                     false});
  }

  // ---- Unary: every op, a misaligned 1-D view of odd length and a transposed 2-D input ----
  const UnaryInfo unary[] = {
      {UnaryOp::Neg, "neg", -2, 2},           {UnaryOp::Exp, "exp", -2, 2},
      {UnaryOp::Log, "log", 0.5, 2},          {UnaryOp::Sqrt, "sqrt", 0.5, 2},
      {UnaryOp::Rsqrt, "rsqrt", 0.5, 2},      {UnaryOp::Abs, "abs", -2, 2},
      {UnaryOp::Square, "square", -2, 2},     {UnaryOp::Reciprocal, "reciprocal", 0.5, 2},
      {UnaryOp::Relu, "relu", -2, 2},         {UnaryOp::Gelu, "gelu", -3, 3},
      {UnaryOp::Tanh, "tanh", -2, 2},         {UnaryOp::Sigmoid, "sigmoid", -3, 3},
      {UnaryOp::Silu, "silu", -3, 3},
  };
  for (const UnaryInfo& u : unary) {
    const UnaryOp op = u.op;
    OpFn fn = [op](const V& v) { return V{unary_op(op, v[0])}; };
    const std::vector<Kernel> k{Kernel::Unary, Kernel::UnaryBackward};
    cases.push_back({std::string(u.name) + "_257_narrowed", k, {InputSpec("x", {257}).range(u.low, u.high).narrowed()}, fn});
    cases.push_back({std::string(u.name) + "_7x33_transposed", k,
                     {InputSpec("x", {7, 33}).range(u.low, u.high).transposed()}, fn});
  }
  cases.push_back({"exp_1", {Kernel::Unary, Kernel::UnaryBackward}, {InputSpec("x", {1})},
                   [](const V& v) { return V{exp(v[0])}; }});
  cases.push_back({"tanh_empty_0x5", {Kernel::Unary, Kernel::UnaryBackward}, {InputSpec("x", {0, 5})},
                   [](const V& v) { return V{tanh(v[0])}; }});
  // A stride-0 (expanded) input: the gradient sums over the broadcast rows.
  cases.push_back({"sigmoid_expanded_1x33_to_5x33", {Kernel::Unary, Kernel::UnaryBackward}, {InputSpec("x", {1, 33})},
                   [](const V& v) { return V{sigmoid(v[0].expand({5, 33}))}; }});
  cases.push_back({"gelu_3x5x7", {Kernel::Unary, Kernel::UnaryBackward}, {InputSpec("x", {3, 5, 7}).range(-4, 4)},
                   [](const V& v) { return V{gelu(v[0])}; }});
  // Channels-last operands (NOTE [ Channels-last ]): the kernels see [N, H, W, C] permutations.
  cases.push_back({"relu_channels_last_2x5x3x7", {Kernel::Unary, Kernel::UnaryBackward},
                   {InputSpec("x", {2, 5, 3, 7}).range(-2, 2).channels_last()},
                   [](const V& v) { return V{kept_format(v[0], relu(v[0]))}; }});

  // ---- Binary with broadcasting and non-contiguous operands ----
  const std::vector<Kernel> bin{Kernel::Binary, Kernel::Reduce};  // gradients of broadcast operands reduce
  cases.push_back({"add_broadcast_3x1x7_5x7", bin, {InputSpec("a", {3, 1, 7}), InputSpec("b", {5, 7})},
                   [](const V& v) { return V{add(v[0], v[1])}; }});
  cases.push_back({"add_transposed_narrowed_7x33", bin,
                   {InputSpec("a", {7, 33}).transposed(), InputSpec("b", {7, 33}).narrowed()},
                   [](const V& v) { return V{add(v[0], v[1])}; }});
  cases.push_back({"add_empty_0x3_0x3", bin, {InputSpec("a", {0, 3}), InputSpec("b", {0, 3})},
                   [](const V& v) { return V{add(v[0], v[1])}; }});
  cases.push_back({"add_channels_last_residual_2x5x3x7", bin,
                   {InputSpec("a", {2, 5, 3, 7}).channels_last(), InputSpec("b", {2, 5, 3, 7}).channels_last()},
                   [](const V& v) { return V{kept_format(v[0], add(v[0], v[1]))}; }});
  cases.push_back({"mul_channels_last_by_contiguous_and_channel_vector", bin,
                   {InputSpec("a", {2, 5, 3, 7}).channels_last(), InputSpec("b", {2, 5, 3, 7}), InputSpec("c", {1, 5, 1, 1})},
                   [](const V& v) { return V{kept_format(v[0], mul(mul(v[0], v[1]), v[2]))}; }});
  // CPU bug (NOTE [ Disabled cases ] in op_harness_test.cpp): a broadcast operand on an empty
  // output takes cpu::strided_loop, which divides by the zero outer size (SIGFPE).
  cases.push_back({"add_empty_broadcast_0x3_3", bin, {InputSpec("a", {0, 3}), InputSpec("b", {3})},
                   [](const V& v) { return V{add(v[0], v[1])}; }});
  cases.push_back({"sub_broadcast_33x1_1x257", bin, {InputSpec("a", {33, 1}), InputSpec("b", {1, 257}).narrowed()},
                   [](const V& v) { return V{sub(v[0], v[1])}; }});
  cases.push_back({"sub_257_odd", bin, {InputSpec("a", {257}).narrowed(), InputSpec("b", {257})},
                   [](const V& v) { return V{sub(v[0], v[1])}; }});
  cases.push_back({"mul_broadcast_2x3x1x5_3x4x1", bin, {InputSpec("a", {2, 3, 1, 5}), InputSpec("b", {3, 4, 1}).transposed()},
                   [](const V& v) { return V{mul(v[0], v[1])}; }});
  cases.push_back({"mul_0d_7x33", bin, {InputSpec("a", {}), InputSpec("b", {7, 33}).transposed()},
                   [](const V& v) { return V{mul(v[0], v[1])}; }});
  cases.push_back({"div_7x33_33", bin, {InputSpec("a", {7, 33}).transposed(), InputSpec("b", {33}).positive().narrowed()},
                   [](const V& v) { return V{div(v[0], v[1])}; }});
  cases.push_back({"div_broadcast_3x1x5_3x4x1", bin, {InputSpec("a", {3, 1, 5}), InputSpec("b", {3, 4, 1}).positive()},
                   [](const V& v) { return V{div(v[0], v[1])}; }});
  // Forward-only binary ops (no public differentiable form).
  cases.push_back({"maximum_broadcast_7x1_7x33", {Kernel::Binary}, {InputSpec("a", {7, 1}), InputSpec("b", {7, 33}).transposed()},
                   backend_binary(BinaryOp::Maximum), false});
  cases.push_back({"minimum_257_narrowed", {Kernel::Binary}, {InputSpec("a", {257}).narrowed(), InputSpec("b", {257})},
                   backend_binary(BinaryOp::Minimum), false});
  cases.push_back({"pow_tensor_5x33_33", {Kernel::Binary},
                   {InputSpec("a", {5, 33}).positive().transposed(), InputSpec("b", {33}).range(-2, 2)},
                   backend_binary(BinaryOp::Pow), false});
  // Equal against the row maximum (as amax's backward uses it): one 1 per row of distinct values.
  cases.push_back({"equal_row_max_7x33", {Kernel::Binary, Kernel::Reduce}, {InputSpec("x", {7, 33}).distinct().transposed()},
                   [](const V& v) {
                     Tensor m = Tensor::empty({7, 1}, v[0].dtype(), v[0].device());
                     v[0].device().backend().reduce(ReduceOp::Max, v[0], m);
                     return backend_binary(BinaryOp::Equal)(V{v[0], m});
                   },
                   false});

  // ---- Scalar ops ----
  const std::vector<Kernel> sc{Kernel::BinaryScalar, Kernel::Binary};
  cases.push_back({"add_scalar_257_narrowed", sc, {InputSpec("x", {257}).narrowed()},
                   [](const V& v) { return V{add(v[0], 0.375)}; }});
  cases.push_back({"mul_scalar_7x33_transposed", sc, {InputSpec("x", {7, 33}).transposed()},
                   [](const V& v) { return V{mul(v[0], -1.75)}; }});
  cases.push_back({"pow_scalar_2_7x33", sc, {InputSpec("x", {7, 33}).range(-2, 2).transposed()},
                   [](const V& v) { return V{pow(v[0], 2.0)}; }});
  cases.push_back({"pow_scalar_3_257", sc, {InputSpec("x", {257}).range(-2, 2).narrowed()},
                   [](const V& v) { return V{pow(v[0], 3.0)}; }});
  cases.push_back({"pow_scalar_half_257", sc, {InputSpec("x", {257}).positive()},
                   [](const V& v) { return V{pow(v[0], 0.5)}; }});
  cases.push_back({"pow_scalar_minus1p5_7x33", sc, {InputSpec("x", {7, 33}).positive().transposed()},
                   [](const V& v) { return V{pow(v[0], -1.5)}; }});
  for (const auto& [op, name, s] : {std::tuple{BinaryOp::Sub, "sub", 0.5}, std::tuple{BinaryOp::Div, "div", -3.0},
                                    std::tuple{BinaryOp::Maximum, "maximum", 0.1},
                                    std::tuple{BinaryOp::Minimum, "minimum", -0.2}}) {
    cases.push_back({std::string(name) + "_scalar_7x33_transposed", {Kernel::BinaryScalar},
                     {InputSpec("x", {7, 33}).transposed()}, backend_binary_scalar(op, s), false});
  }
  cases.push_back({"equal_scalar_indices_257", {Kernel::BinaryScalar, Kernel::Copy}, {indices("t", {257}, 5)},
                   [](const V& v) {
                     // cross_entropy's ignore count: targets as float64, compared with one value.
                     Tensor t = Tensor::empty({257}, kFloat64, v[0].device());
                     v[0].device().backend().copy(v[0], t);
                     return backend_binary_scalar(BinaryOp::Equal, 3.0)(V{t});
                   },
                   false});

  // ---- axpby (gradient accumulation, optimisers); beta == 0 must not read y (NaN there) ----
  cases.push_back({"axpby_257", {Kernel::Axpby}, {InputSpec("x", {257}).no_grad(), InputSpec("y", {257}).no_grad()},
                   [](const V& v) {
                     v[0].device().backend().axpby(0.625, v[0], -1.25, v[1]);
                     return V{v[1]};
                   },
                   false});
  cases.push_back({"axpby_beta0_nan_y_7x33", {Kernel::Axpby}, {InputSpec("x", {7, 33}).no_grad()},
                   [nan](const V& v) {
                     Tensor y = full(v[0].shape(), nan, v[0].dtype(), v[0].device());
                     v[0].device().backend().axpby(-2.0, v[0], 0.0, y);
                     return V{y};
                   },
                   false});
  cases.push_back({"axpby_gradient_accumulation_7x33", {Kernel::Axpby, Kernel::BinaryScalar},
                   {InputSpec("x", {7, 33}).transposed()},
                   [](const V& v) {  // x used twice: its gradient is accumulated
                     return V{add(mul(v[0], 2.0), mul(v[0], -0.5))};
                   }});

  // ---- Dropout: the same generator seed gives the same mask on every device ----
  cases.push_back({"dropout_p0p3_7x33_narrowed", {Kernel::Random, Kernel::Binary, Kernel::BinaryScalar},
                   {InputSpec("x", {7, 33}).narrowed()},
                   [](const V& v) {
                     Generator gen(2024);
                     gen.reserve(5);
                     return V{dropout(v[0], 0.3, true, gen)};
                   }});
  cases.push_back({"dropout_p0p5_1031_transposed", {Kernel::Random, Kernel::Binary, Kernel::BinaryScalar},
                   {InputSpec("x", {1031}).transposed()},
                   [](const V& v) {
                     Generator gen(7);
                     return V{dropout(v[0], 0.5, true, gen)};
                   }});
  return cases;
}

}  // namespace dp::testing::harness
