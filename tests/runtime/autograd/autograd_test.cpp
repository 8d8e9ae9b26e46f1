#include <gtest/gtest.h>

#include "common/gradcheck.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape_ops.h"

namespace dp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

class AutogradTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{42};
  Tensor in(const Shape& s, double lo = -1, double hi = 1) { return random_input(s, gen, cpu, lo, hi); }
};

TEST_F(AutogradTest, BinaryOpsWithBroadcastingAndNoncontiguousInputs) {
  auto f_add = [](const std::vector<Tensor>& v) { return add(v[0], v[1]); };
  auto f_sub = [](const std::vector<Tensor>& v) { return sub(v[0], v[1]); };
  auto f_mul = [](const std::vector<Tensor>& v) { return mul(v[0], v[1]); };
  auto f_div = [](const std::vector<Tensor>& v) { return div(v[0], v[1]); };
  for (auto f : {+f_add, +f_sub, +f_mul}) {
    EXPECT_GRADCHECK(gradcheck(f, {in({3, 4}), in({3, 4})}));
    EXPECT_GRADCHECK(gradcheck(f, {in({2, 3, 4}), in({3, 1})}));
    EXPECT_GRADCHECK(gradcheck(f, {noncontiguous_copy(in({4, 3})), in({3})}));
    EXPECT_GRADCHECK(gradcheck(f, {in({1, 3}), noncontiguous_copy(in({5, 3}))}));
  }
  EXPECT_GRADCHECK(gradcheck(f_div, {in({2, 3, 4}), in({3, 1}, 0.5, 2.0)}));
  EXPECT_GRADCHECK(gradcheck(f_div, {noncontiguous_copy(in({4, 3})), in({4, 1}, 0.5, 2.0)}));
}

TEST_F(AutogradTest, ScalarOps) {
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return add(mul(v[0], 3.0), 1.5); }, {in({5})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return pow(v[0], 3.0); }, {in({5}, 0.5, 2)}));
}

TEST_F(AutogradTest, UnaryOpsAndActivations) {
  using Fn = Tensor (*)(const Tensor&);
  struct Case { const char* name; Fn fn; double lo, hi; };
  const Case cases[] = {{"neg", neg, -1, 1},       {"exp", exp, -1, 1},         {"log", log, 0.5, 2},
                        {"sqrt", sqrt, 0.5, 2},    {"rsqrt", rsqrt, 0.5, 2},    {"abs", abs, 0.1, 1},
                        {"square", square, -1, 1}, {"relu", relu, -1, 1},       {"gelu", gelu, -2, 2},
                        {"tanh", tanh, -2, 2},     {"sigmoid", sigmoid, -3, 3}, {"silu", silu, -3, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Fn fn = c.fn;
    EXPECT_GRADCHECK(gradcheck([fn](const std::vector<Tensor>& v) { return fn(v[0]); }, {in({3, 4}, c.lo, c.hi)}));
    EXPECT_GRADCHECK(gradcheck([fn](const std::vector<Tensor>& v) { return fn(v[0]); },
                               {noncontiguous_copy(in({4, 3}, c.lo, c.hi))}));
  }
}

TEST_F(AutogradTest, ReductionsAndViews) {
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return sum(v[0], {1}); }, {in({3, 4, 2})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return mean(v[0], {0, 2}, true); }, {in({3, 4, 2})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return amax(v[0], {-1}); }, {in({3, 5})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return sum(v[0]); }, {noncontiguous_copy(in({3, 5}))}));
  EXPECT_GRADCHECK(gradcheck(
      [](const std::vector<Tensor>& v) { return v[0].permute({2, 0, 1}).reshape({4, 6}).narrow(0, 1, 2).t(); },
      {in({2, 3, 4})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return v[0].unsqueeze(1).expand({3, 4, 5}); },
                             {in({3, 5})}));
  EXPECT_GRADCHECK(gradcheck(
      [](const std::vector<Tensor>& v) { return cat({v[0], v[1].t()}, 1); }, {in({3, 2}), in({4, 3})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return split(v[0], {1, 3}, 1)[1]; }, {in({2, 4})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return v[0].to(kFloat32).to(kFloat64); },
                             {in({3})}, {1e-3, 1e-5, 1e-3}));
}

TEST_F(AutogradTest, MatmulAndLinear) {
  auto f_mm = [](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); };
  EXPECT_GRADCHECK(gradcheck(f_mm, {in({3, 4}), in({4, 5})}));
  EXPECT_GRADCHECK(gradcheck(f_mm, {noncontiguous_copy(in({3, 4})), noncontiguous_copy(in({4, 5}))}));
  EXPECT_GRADCHECK(gradcheck(f_mm, {in({2, 3, 4}), in({2, 4, 5})}));
  EXPECT_GRADCHECK(gradcheck(f_mm, {in({2, 3, 4}), in({4, 5})}));  // broadcast right operand
  auto f_lin = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  EXPECT_GRADCHECK(gradcheck(f_lin, {in({5, 3}), in({4, 3}), in({4})}));
  EXPECT_GRADCHECK(gradcheck(f_lin, {in({2, 5, 3}), noncontiguous_copy(in({4, 3})), in({4})}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return linear(v[0], v[1]); },
                             {noncontiguous_copy(in({5, 3})), in({2, 3})}));
}

TEST_F(AutogradTest, MatmulValuesMatchHandComputation) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, cpu);
  Tensor b = from_vector<float>({1, 0, 0, 1, 1, 1}, {3, 2}, cpu);
  EXPECT_EQ(matmul(a, b).to_vector<float>(), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_EQ(matmul(b.t(), a.t()).to_vector<float>(), (std::vector<float>{4, 10, 5, 11}));
  Tensor w = from_vector<float>({1, 1, 1, 0, 0, 1}, {2, 3}, cpu);
  Tensor bias = from_vector<float>({10, 20}, {2}, cpu);
  EXPECT_EQ(linear(a, w, bias).to_vector<float>(), (std::vector<float>{16, 23, 25, 26}));
}

TEST_F(AutogradTest, GradientsAccumulateAndSetToNone) {
  Tensor w = from_vector<double>({1, 2}, {2}, cpu);
  w.set_requires_grad(true);
  sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{2, 4}));
  sum(mul(w, w)).backward();  // accumulates
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{4, 8}));
  w.set_grad(Tensor());  // zero_grad(set_to_none=True)
  EXPECT_FALSE(w.grad().defined());
}

// NOTE [ Stealing the first gradient ] (node.cpp): a gradient that something else can still see
// is copied, never adopted: add's backward hands the same tensor to both inputs, a slice of a
// concatenation's gradient is a view into a shared buffer, and a user's root gradient stays theirs.
TEST_F(AutogradTest, FirstGradientIsAdoptedOnlyWhenNothingElseSeesIt) {
  Tensor a = from_vector<double>({1, 2}, {2}, cpu), b = from_vector<double>({3, 4}, {2}, cpu);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  sum(add(a, b)).backward();
  a.grad().fill_(7.0);
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{1, 1}));

  Tensor c = from_vector<double>({1, 2}, {2}, cpu), d = from_vector<double>({3, 4, 5}, {3}, cpu);
  c.set_requires_grad(true);
  d.set_requires_grad(true);
  Tensor weights = from_vector<double>({1, 2, 3, 4, 5}, {5}, cpu);
  sum(mul(cat({c, d}, 0), weights)).backward();
  ASSERT_TRUE(c.grad().is_contiguous());
  EXPECT_EQ(c.grad().shape(), (Shape{2}));
  c.grad().fill_(0.0);
  EXPECT_EQ(d.grad().to_vector<double>(), (std::vector<double>{3, 4, 5}));

  Tensor leaf = from_vector<double>({1, 2}, {2}, cpu);
  leaf.set_requires_grad(true);
  Tensor mine = from_vector<double>({5, 6}, {2}, cpu);
  leaf.backward(mine);
  leaf.grad().fill_(0.0);
  EXPECT_EQ(mine.to_vector<double>(), (std::vector<double>{5, 6}));

  // And an unshared gradient, adopted, still accumulates like a copy would.
  Tensor w = from_vector<double>({1, 2}, {2}, cpu);
  w.set_requires_grad(true);
  sum(mul(w, 3.0)).backward();
  sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{5, 7}));
}

TEST_F(AutogradTest, HookFiresOncePerBackwardWhenGradientIsFinal) {
  Tensor w = from_vector<double>({1, 2, 3}, {3}, cpu);
  w.set_requires_grad(true);
  int fired = 0;
  std::vector<double> seen;
  w.register_grad_ready_hook([&](Tensor& t) {
    ++fired;
    seen = t.grad().to_vector<double>();
  });
  // w reaches the loss through three paths: the hook must see the full sum, once.
  Tensor y = add(add(mul(w, 2.0), mul(w, w)), w);
  sum(y).backward();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(seen, (std::vector<double>{5, 7, 9}));
  sum(mul(w, 3.0)).backward();
  EXPECT_EQ(fired, 2);
}

TEST_F(AutogradTest, HooksFireInReverseLayerOrder) {
  Tensor w1 = in({4, 4}), w2 = in({4, 4}), w3 = in({4, 4});
  std::vector<int> order;
  w1.register_grad_ready_hook([&](Tensor&) { order.push_back(1); });
  w2.register_grad_ready_hook([&](Tensor&) { order.push_back(2); });
  w3.register_grad_ready_hook([&](Tensor&) { order.push_back(3); });
  Tensor x = in({2, 4});
  Tensor h = tanh(matmul(tanh(matmul(tanh(matmul(x, w1)), w2)), w3));
  sum(h).backward();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1}));
}

TEST_F(AutogradTest, GraphIsFreedAfterBackward) {
  Tensor w = in({3});
  Tensor big = in({1000});
  Tensor y = sum(mul(w, sum(big)));
  std::weak_ptr<Storage> saved = big.storage();
  y.backward();
  EXPECT_THROW(y.backward(), Error);  // second backward through a freed graph
}

TEST_F(AutogradTest, NoGradScopeRecordsNothing) {
  Tensor w = in({3});
  {
    NoGradGuard guard;
    Tensor y = mul(w, 2.0);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(mul(w, 2.0).requires_grad());
}

TEST_F(AutogradTest, InPlaceChangeOfSavedTensorIsDetected) {
  Tensor w = in({3});
  Tensor x = from_vector<double>({1, 2, 3}, {3}, cpu);
  Tensor y = sum(mul(w, x));
  x.fill_(0.0);
  EXPECT_THROW(y.backward(), Error);
}

TEST_F(AutogradTest, InPlaceOnLeafRequiringGradIsRefused) {
  Tensor w = in({3});
  EXPECT_THROW(w.fill_(1.0), Error);
  NoGradGuard guard;
  EXPECT_NO_THROW(w.fill_(1.0));
}

}  // namespace
}  // namespace dp
