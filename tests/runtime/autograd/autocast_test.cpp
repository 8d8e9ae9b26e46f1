// Autocast (NOTE [ Autocast policy ] in runtime/autograd/autocast.h): the thread-local mode,
// each policy class's output dtypes, gradients arriving in the parameters' float32, and values
// within the low dtype's rounding of the float32 results.
#include <gtest/gtest.h>

#include <thread>

#include "common/expect_error.h"
#include "common/reference.h"
#include "runtime/autograd/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

using testing::error_of;

// Relative to the largest reference magnitude: bfloat16 keeps 8 significant bits (2^-8 ≈ 0.4 %
// per rounding), float16 11; a few roundings accumulate.
double tolerance(DType dtype) { return dtype == kBFloat16 ? 3e-2 : 4e-3; }

std::string compare_relative(const std::string& what, const Tensor& actual, const Tensor& expected, DType dtype) {
  const Tensor e = expected.to(kFloat64);
  double scale = 1e-6;
  for (double v : e.to_vector<double>()) scale = std::max(scale, std::abs(v));
  return testing::compare_tensors(what, actual.to(kFloat64), e, tolerance(dtype) * scale);
}

class AutocastTest : public ::testing::TestWithParam<DType> {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor param(const Shape& s) { return randn(s, gen, kFloat32, cpu).set_requires_grad(true); }
  Tensor input(const Shape& s) { return randn(s, gen, kFloat32, cpu); }
  // A fresh leaf holding `t`'s values (so one tensor's gradients never mix two runs).
  static Tensor leaf(const Tensor& t) { return t.detach().contiguous().to(kFloat64).to(t.dtype()).set_requires_grad(true); }
};

TEST(Autocast, OffByDefaultScopedAndPerThread) {
  EXPECT_FALSE(Autocast::enabled());
  EXPECT_EQ(Autocast::dtype(), kFloat32);
  {
    AutocastGuard bf16(kBFloat16);
    EXPECT_EQ(Autocast::dtype(), kBFloat16);
    {
      AutocastGuard off(kFloat32);
      EXPECT_FALSE(Autocast::enabled());
    }
    EXPECT_EQ(Autocast::dtype(), kBFloat16);
    DType seen_by_other_thread = kBFloat16;
    std::thread([&] { seen_by_other_thread = Autocast::dtype(); }).join();
    EXPECT_EQ(seen_by_other_thread, kFloat32);  // a loader thread never autocasts by accident
  }
  EXPECT_FALSE(Autocast::enabled());
  EXPECT_NE(error_of([] { Autocast::set_dtype(kFloat64); })
                .find("autocast: the low-precision dtype must be bfloat16 or float16 (float32 turns autocast off), got float64"),
            std::string::npos);
}

TEST(Autocast, PolicyTableIsTheDocumentedOne) {
  for (AutocastOp op : {AutocastOp::Matmul, AutocastOp::Linear, AutocastOp::Conv2d})
    EXPECT_EQ(autocast_policy(op), CastPolicy::LowerPrecision) << autocast_op_name(op);
  for (AutocastOp op : {AutocastOp::Softmax, AutocastOp::LogSoftmax, AutocastOp::CrossEntropy, AutocastOp::Sum,
                        AutocastOp::Mean, AutocastOp::Exp, AutocastOp::Log, AutocastOp::Pow, AutocastOp::Reciprocal,
                        AutocastOp::Rsqrt})
    EXPECT_EQ(autocast_policy(op), CastPolicy::Float32) << autocast_op_name(op);
  for (AutocastOp op : {AutocastOp::BatchNorm, AutocastOp::LayerNorm})
    EXPECT_EQ(autocast_policy(op), CastPolicy::Normalisation) << autocast_op_name(op);
  AutocastGuard fp16(kFloat16);
  EXPECT_EQ(autocast_dtype_for(AutocastOp::Linear, kFloat32), kFloat16);
  EXPECT_EQ(autocast_dtype_for(AutocastOp::Linear, kFloat64), kFloat64);  // float64 is never cast
  EXPECT_EQ(autocast_dtype_for(AutocastOp::Softmax, kFloat16), kFloat32);
  EXPECT_EQ(autocast_dtype_for(AutocastOp::LayerNorm, kFloat16), kFloat16);
  EXPECT_EQ(autocast_dtype_for(AutocastOp::Sum, kInt64), kInt64);
}

// linear, matmul, conv2d: low-precision outputs; float32 parameters get float32 gradients close
// to the float32 run's.
TEST_P(AutocastTest, LowerPrecisionOpsRunInTheLowDtypeAndGiveFloat32Gradients) {
  const DType low = GetParam();
  const Tensor x = input({6, 33}), w = param({9, 33}), b = param({9});
  const Tensor img = input({2, 3, 9, 9}), cw = param({5, 3, 3, 3}), cb = param({5});
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  auto run = [&](DType dtype, std::vector<Tensor>& leaves) {
    leaves = {leaf(w), leaf(b), leaf(cw), leaf(cb), leaf(x)};
    AutocastGuard guard(dtype);
    Tensor y1 = linear(leaves[4], leaves[0], leaves[1]);
    Tensor y2 = matmul(leaves[4], leaves[0].t());
    Tensor y3 = conv2d(img, leaves[2], leaves[3], p);
    return std::vector<Tensor>{y1, y2, y3};
  };
  std::vector<Tensor> ref_leaves, low_leaves;
  const std::vector<Tensor> ref = run(kFloat32, ref_leaves), out = run(low, low_leaves);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].dtype(), low) << "output " << i;
    EXPECT_TRUE(compare_relative("output " + std::to_string(i), out[i], ref[i], low).empty());
  }
  // Backward with autocast off (the engine turns it off anyway) through a float32 loss.
  auto loss = [](const std::vector<Tensor>& ys) {
    return add(add(sum(mul(ys[0].to(kFloat32), ys[0].to(kFloat32))), sum(ys[1].to(kFloat32))),
               sum(mul(ys[2].to(kFloat32), ys[2].to(kFloat32))));
  };
  loss(ref).backward();
  {
    AutocastGuard guard(low);  // backward inside an autocast region still follows the forward's dtypes
    loss(out).backward();
  }
  const char* names[] = {"linear.weight", "linear.bias", "conv.weight", "conv.bias", "x"};
  for (size_t i = 0; i < low_leaves.size(); ++i) {
    ASSERT_TRUE(low_leaves[i].grad().defined()) << names[i];
    EXPECT_EQ(low_leaves[i].grad().dtype(), kFloat32) << names[i];
    const std::string msg = compare_relative(names[i], low_leaves[i].grad(), ref_leaves[i].grad(), low);
    EXPECT_TRUE(msg.empty()) << msg;
  }
}

// softmax, log_softmax, cross-entropy, sum, mean, exp, log, pow, rsqrt: float32 out of low inputs.
TEST_P(AutocastTest, Float32OpsWidenLowPrecisionInputs) {
  const DType low = GetParam();
  const Tensor logits = input({4, 10}).to(low);
  const Tensor positive = rand({4, 10}, gen, kFloat32, cpu, 0.5, 2.0).to(low);
  const Tensor target = from_host(std::vector<int64_t>{1, 0, 9, 3}.data(), {4}, kInt64, cpu);
  AutocastGuard guard(low);
  for (const Tensor& t : {softmax(logits, 1), log_softmax(logits, 1), cross_entropy(logits, target), sum(logits),
                          mean(logits, {1}), exp(logits), log(positive), pow(positive, 1.5), rsqrt(positive)})
    EXPECT_EQ(t.dtype(), kFloat32) << t.str();
  // Outside autocast the same ops keep the dtype they are given (where the CPU has the kernel).
  AutocastGuard off(kFloat32);
  EXPECT_EQ(sum(logits).dtype(), low);
  EXPECT_EQ(exp(logits).dtype(), low);
}

// relu, pooling keep the input dtype; a binary op of two dtypes runs in the wider one and each
// operand's gradient comes back in its own dtype.
TEST_P(AutocastTest, OtherOpsKeepTheirDtypeAndBinaryOpsPromote) {
  const DType low = GetParam();
  AutocastGuard guard(low);
  const Tensor a = leaf(input({2, 3, 4, 4}).to(low)), b = leaf(input({3, 1, 1}));
  EXPECT_EQ(relu(a).dtype(), low);
  Pool2dParams pool;
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  EXPECT_EQ(max_pool2d(a, pool).dtype(), low);
  const Tensor c = add(a, b);
  EXPECT_EQ(c.dtype(), kFloat32);
  sum(mul(c, c)).backward();
  EXPECT_EQ(a.grad().dtype(), low);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  const Tensor f16 = input({3}).to(kFloat16), bf16 = input({3}).to(kBFloat16);
  EXPECT_EQ(mul(f16, bf16).dtype(), kFloat32);  // neither holds the other, as PyTorch
  const Tensor f64 = input({3}).to(kFloat64);
  EXPECT_EQ(add(f64, f16).dtype(), kFloat64);
}

// Normalisation with low-precision activations and float32 weight, bias and running statistics:
// y and dx in the activation dtype, dweight/dbias and the statistics in float32, all within
// rounding of the float32 computation.
TEST_P(AutocastTest, NormsTakeFloat32ParametersWithLowPrecisionActivations) {
  const DType low = GetParam();
  const Tensor x = input({4, 3, 5, 5}), w = param({3}), b = param({3});
  const Tensor rows = input({6, 16}), lw = param({16}), lb = param({16});
  const Tensor ry = input({4, 3, 5, 5}), rz = input({6, 16});
  auto run = [&](DType act, std::vector<Tensor>& leaves, Tensor& running_mean, Tensor& running_var) {
    leaves = {leaf(x.to(act)), leaf(w), leaf(b), leaf(rows.to(act)), leaf(lw), leaf(lb)};
    running_mean = zeros({3}, kFloat32, cpu);
    running_var = ones({3}, kFloat32, cpu);
    Tensor y = batch_norm(leaves[0], leaves[1], leaves[2], running_mean, running_var, true, 0.1, 1e-5);
    Tensor z = layer_norm(leaves[3], {16}, leaves[4], leaves[5], 1e-5);
    EXPECT_EQ(y.dtype(), act);
    EXPECT_EQ(z.dtype(), act);
    // Random upstream weights: sum(y²) would be constant in x through a normalisation.
    add(sum(mul(y, ry)), sum(mul(z, rz))).backward();
    return std::vector<Tensor>{y, z};
  };
  std::vector<Tensor> ref_leaves, low_leaves;
  Tensor ref_mean, ref_var, low_mean, low_var;
  const std::vector<Tensor> ref = run(kFloat32, ref_leaves, ref_mean, ref_var);
  const std::vector<Tensor> out = run(low, low_leaves, low_mean, low_var);
  EXPECT_TRUE(compare_relative("batch_norm y", out[0], ref[0], low).empty());
  EXPECT_TRUE(compare_relative("layer_norm y", out[1], ref[1], low).empty());
  EXPECT_EQ(low_mean.dtype(), kFloat32);
  EXPECT_TRUE(compare_relative("running_mean", low_mean, ref_mean, low).empty());
  EXPECT_TRUE(compare_relative("running_var", low_var, ref_var, low).empty());
  const char* names[] = {"bn x", "bn weight", "bn bias", "ln x", "ln weight", "ln bias"};
  for (size_t i = 0; i < low_leaves.size(); ++i) {
    EXPECT_EQ(low_leaves[i].grad().dtype(), low_leaves[i].dtype()) << names[i];
    const std::string msg = compare_relative(names[i], low_leaves[i].grad(), ref_leaves[i].grad(), low);
    EXPECT_TRUE(msg.empty()) << msg;
  }
  // A float32 parameter is allowed beside low activations only: float64 beside float32 is not.
  EXPECT_NE(error_of([&] { layer_norm(rows, {16}, lw.to(kFloat64), Tensor(), 1e-5); })
                .find("must have the input's dtype (input"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(LowDtypes, AutocastTest, ::testing::Values(kBFloat16, kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dp
