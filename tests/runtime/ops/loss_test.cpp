#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

using testing::compare_float32_with_float64;
using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

class LossTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor in(const Shape& s, double lo = -2, double hi = 2) { return random_input(s, gen, cpu, lo, hi); }
  Tensor targets(const std::vector<int64_t>& t) { return from_vector<int64_t>(t, {int64_t(t.size())}, cpu); }
};

const char* reduction_name(Reduction r) {
  return r == Reduction::Mean ? "mean" : (r == Reduction::Sum ? "sum" : "none");
}

// ---- softmax / log_softmax -------------------------------------------------------------------

TEST_F(LossTest, SoftmaxAndLogSoftmaxGradcheckAnyDim) {
  using Fn = Tensor (*)(const Tensor&, int64_t);
  for (Fn fn : {static_cast<Fn>(softmax), static_cast<Fn>(log_softmax)})
    for (int64_t dim : {0, -1, 1}) {
      SCOPED_TRACE((fn == static_cast<Fn>(softmax) ? "softmax dim " : "log_softmax dim ") + std::to_string(dim));
      auto f = [fn, dim](const std::vector<Tensor>& v) { return fn(v[0], dim); };
      EXPECT_GRADCHECK(gradcheck(f, {in({3, 4, 5})}));
      EXPECT_GRADCHECK(gradcheck(f, {noncontiguous_copy(in({4, 5}))}));
    }
}

TEST_F(LossTest, SoftmaxValuesStableForLargeInputs) {
  Tensor x = from_vector<double>({1000, 1001, 1002, -1000, 0, 1000}, {2, 3}, cpu);
  const std::vector<double> p = softmax(x, -1).to_vector<double>();
  const double z = 1 + std::exp(-1.0) + std::exp(-2.0);
  EXPECT_NEAR(p[2], 1 / z, 1e-15);
  EXPECT_NEAR(p[0], std::exp(-2.0) / z, 1e-15);
  EXPECT_NEAR(p[5], 1 / (1 + std::exp(-1000.0) + std::exp(-2000.0)), 1e-15);
  const std::vector<double> lp = log_softmax(x, -1).to_vector<double>();
  EXPECT_NEAR(lp[2], -std::log(z), 1e-12);
  EXPECT_NEAR(lp[3], -2000.0, 1e-9);  // exp would underflow: log_softmax stays finite
  // Over dim 0 each column sums to 1.
  const std::vector<double> col = softmax(x, 0).to_vector<double>();
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(col[j] + col[3 + j], 1.0, 1e-15);
}

TEST_F(LossTest, SoftmaxFloat32MatchesFloat64Threaded) {
  for (int64_t dim : {-1, 1}) {
    auto fn = [dim](const std::vector<Tensor>& v) { return log_softmax(v[0], dim); };
    EXPECT_EQ(compare_float32_with_float64(fn, {in({64, 32, 20}, -5, 5)}, 1e-5), "");
    auto fs = [dim](const std::vector<Tensor>& v) { return softmax(v[0], dim); };
    EXPECT_EQ(compare_float32_with_float64(fs, {in({64, 32, 20}, -5, 5)}, 1e-6), "");
  }
}

// ---- cross_entropy ---------------------------------------------------------------------------

TEST_F(LossTest, CrossEntropyGradcheckAllOptions) {
  // Sample 2 is ignored (target -100).
  Tensor target = targets({1, 0, -100, 3, 2});
  for (Reduction reduction : {Reduction::Mean, Reduction::Sum, Reduction::None})
    for (double smoothing : {0.0, 0.1})
      for (bool noncontiguous : {false, true}) {
        SCOPED_TRACE(std::string(reduction_name(reduction)) + " smoothing " + std::to_string(smoothing) +
                     (noncontiguous ? " noncontiguous" : ""));
        auto fn = [=](const std::vector<Tensor>& v) {
          return cross_entropy(v[0], target, reduction, -100, smoothing);
        };
        Tensor logits = noncontiguous ? noncontiguous_copy(in({5, 4})) : in({5, 4});
        EXPECT_GRADCHECK(gradcheck(fn, {logits}));
      }
}

TEST_F(LossTest, CrossEntropyHandComputedValues) {
  // Row 0: logits 1, 2, 3, target 2. Row 1: 0, 0, 0, target 0. Row 2: ignored.
  Tensor logits = from_vector<double>({1, 2, 3, 0, 0, 0, 5, -5, 0}, {3, 3}, cpu);
  Tensor target = targets({2, 0, 7});
  const double lse0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), lse1 = std::log(3.0);
  const double nll0 = lse0 - 3, nll1 = lse1;
  auto loss = [&](Reduction r, double eps) { return cross_entropy(logits, target, r, 7, eps); };

  const std::vector<double> none = loss(Reduction::None, 0).to_vector<double>();
  EXPECT_NEAR(none[0], nll0, 1e-14);
  EXPECT_NEAR(none[1], nll1, 1e-14);
  EXPECT_EQ(none[2], 0.0);
  EXPECT_NEAR(loss(Reduction::Sum, 0).item<double>(), nll0 + nll1, 1e-14);
  EXPECT_NEAR(loss(Reduction::Mean, 0).item<double>(), (nll0 + nll1) / 2, 1e-14);  // 2 counted samples

  // Smoothing 0.3 over C = 3: (1-ε)·nll + ε·mean_c(-log p_c); -Σ_c log p_c = C·lse - Σ x.
  const double eps = 0.3;
  const double smooth0 = (1 - eps) * nll0 + eps * (3 * lse0 - 6) / 3, smooth1 = (1 - eps) * nll1 + eps * lse1;
  EXPECT_NEAR(loss(Reduction::Mean, eps).item<double>(), (smooth0 + smooth1) / 2, 1e-14);
  EXPECT_NEAR(loss(Reduction::Sum, eps).item<double>(), smooth0 + smooth1, 1e-14);
}

TEST_F(LossTest, CrossEntropyMeanWithEveryTargetIgnoredIsNaN) {
  Tensor loss = cross_entropy(in({2, 3}), targets({-100, -100}));
  EXPECT_TRUE(std::isnan(loss.item<double>()));
}

TEST_F(LossTest, CrossEntropyFloat32MatchesFloat64Threaded) {
  // 4096 x 10: the threaded path (SmallCNN's 10 classes, a large batch).
  std::vector<int64_t> t(4096);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i % 17 == 0 ? -100 : static_cast<int64_t>(i * 7 % 10);
  Tensor target = targets(t);
  for (double smoothing : {0.0, 0.1}) {
    auto fn = [=](const std::vector<Tensor>& v) {
      return cross_entropy(v[0], target, Reduction::None, -100, smoothing);
    };
    EXPECT_EQ(compare_float32_with_float64(fn, {in({4096, 10}, -4, 4)}, 1e-5), "");
  }
}

TEST_F(LossTest, CrossEntropyErrors) {
  Tensor logits = in({3, 5});
  EXPECT_ERROR_CONTAINS(cross_entropy(logits, targets({0, 5, 1})),
                        "cross_entropy: target 5 (sample 1) is out of range for 5 classes");
  EXPECT_ERROR_CONTAINS(cross_entropy(logits, targets({0, -1, 1})), "target -1 (sample 1)");
  EXPECT_ERROR_CONTAINS(cross_entropy(logits, targets({0, 1, 2}).to(kFloat64)), "target must hold int64");
  EXPECT_ERROR_CONTAINS(cross_entropy(logits, targets({0, 1})), "must be [N] for logits");
  EXPECT_ERROR_CONTAINS(cross_entropy(in({3}), targets({0, 1, 2})), "expected logits [N, C]");
  EXPECT_ERROR_CONTAINS(cross_entropy(logits, targets({0, 1, 2}), Reduction::Mean, -100, 1.5),
                        "label_smoothing must be in [0, 1]");
}

// ---- topk_hits (NOTE [ Top-5 accuracy ] in launch/objectives.h) --------------------------------

// Logits on a grid of 7 values, so that rows hold many ties with their target's logit.
Tensor grid_logits(int64_t N, int64_t C, std::mt19937& rng, Device cpu, std::vector<float>& values) {
  std::uniform_int_distribution<int> level(-3, 3);
  values.resize(static_cast<size_t>(N * C));
  for (float& v : values) v = 0.5f * static_cast<float>(level(rng));
  return from_vector<float>(values, {N, C}, cpu);
}

// Brute force: the classes before the target in a descending stable sort with NaN first.
bool reference_topk_hit(const std::vector<float>& row, int64_t target, int64_t k) {
  const float t = row[static_cast<size_t>(target)];
  if (std::isnan(t)) return false;
  int64_t before = 0;
  for (size_t c = 0; c < row.size(); ++c)
    before += std::isnan(row[c]) || row[c] > t || (row[c] == t && static_cast<int64_t>(c) < target);
  return before < k;
}

TEST_F(LossTest, TopkHitsAreTheRowsWithFewerThanKClassesBeforeTheTarget) {
  std::mt19937 rng(5);
  const int64_t N = 300, C = 37;
  std::vector<float> values;
  const Tensor logits = grid_logits(N, C, rng, cpu, values);
  std::vector<int64_t> t(static_cast<size_t>(N));
  std::uniform_int_distribution<int64_t> cls(0, C - 1);
  for (int64_t& v : t) v = cls(rng);
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{5}, C - 1, C, C + 8}) {
    const std::vector<float> hits = topk_hits(logits, targets(t), k).to_vector<float>();
    ASSERT_EQ(hits.size(), static_cast<size_t>(N));
    int64_t total = 0;
    for (int64_t n = 0; n < N; ++n) {
      const std::vector<float> row(values.begin() + n * C, values.begin() + (n + 1) * C);
      const bool hit = reference_topk_hit(row, t[static_cast<size_t>(n)], k);
      ASSERT_EQ(hits[static_cast<size_t>(n)], hit ? 1.0f : 0.0f) << "k " << k << ", row " << n;
      total += hit;
    }
    if (k == 1) {  // ties in index order: top-1 is argmax's accuracy (argmax takes the first maximum)
      const std::vector<int64_t> top = argmax(logits, 1).to_vector<int64_t>();
      for (size_t n = 0; n < t.size(); ++n) ASSERT_EQ(hits[n], top[n] == t[n] ? 1.0f : 0.0f) << n;
    }
    if (k == 1) {
      EXPECT_GT(total, 0);
    }
    if (k <= 5) {
      EXPECT_LT(total, N) << "k " << k;  // not vacuous: misses happen
    }
    if (k >= C) {
      EXPECT_EQ(total, N);
    }
  }
}

TEST_F(LossTest, TopkHitsWithoutTiesIsTheArgmaxAccuracyAtK1AndTorchsTopkAt5) {
  // Distinct logits: top-1 hits are argmax's; top-5 are torch.topk(5)'s membership.
  const int64_t N = 200, C = 1000;
  const Tensor logits = in({N, C}, -8, 8);
  std::mt19937 rng(9);
  std::vector<int64_t> t(static_cast<size_t>(N));
  std::uniform_int_distribution<int64_t> cls(0, C - 1);
  for (size_t n = 0; n < t.size(); ++n) t[n] = n % 3 == 0 ? -1 : cls(rng);  // -1: filled below
  const std::vector<int64_t> top = argmax(logits, 1).to_vector<int64_t>();
  for (size_t n = 0; n < t.size(); n += 3) t[n] = top[n];  // a third are argmax hits
  const std::vector<float> top1 = topk_hits(logits, targets(t), 1).to_vector<float>();
  for (size_t n = 0; n < t.size(); ++n) ASSERT_EQ(top1[n], t[n] == top[n] ? 1.0f : 0.0f) << n;
  const std::vector<float> v = logits.to_vector<float>();
  const std::vector<float> top5 = topk_hits(logits, targets(t), 5).to_vector<float>();
  for (size_t n = 0; n < t.size(); ++n) {
    std::vector<std::pair<float, int64_t>> row;
    for (int64_t c = 0; c < C; ++c) row.emplace_back(-v[n * C + static_cast<size_t>(c)], c);
    std::partial_sort(row.begin(), row.begin() + 5, row.end());
    bool in_top5 = false;
    for (int j = 0; j < 5; ++j) in_top5 |= row[static_cast<size_t>(j)].second == t[n];
    ASSERT_EQ(top5[n], in_top5 ? 1.0f : 0.0f) << n;
  }
}

TEST_F(LossTest, TopkHitsOfLowPrecisionLogitsCompareInFloat32) {
  std::mt19937 rng(2);
  std::vector<float> values;
  const Tensor logits = grid_logits(50, 20, rng, cpu, values);  // the grid is exact in bf16 and f16
  std::vector<int64_t> t(50);
  for (size_t n = 0; n < t.size(); ++n) t[n] = static_cast<int64_t>(n % 20);
  const std::vector<float> want = topk_hits(logits, targets(t), 5).to_vector<float>();
  for (DType dtype : {kBFloat16, kFloat16, kFloat64})
    EXPECT_EQ(topk_hits(logits.to(dtype), targets(t), 5).to_vector<float>(), want) << dtype_name(dtype);
}

// A broken model's logits: NaN sorts first (a NaN target is never a hit), infinities compare as
// numbers, and all-equal logits rank the target by its index — never 100 % top-5 for free.
TEST_F(LossTest, TopkHitsOfNanInfiniteAndTiedLogits) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t C = 12;
  const std::vector<std::vector<float>> rows = {
      std::vector<float>(C, 0.0f),                                   // all tied
      std::vector<float>(C, nan),                                    // all NaN
      {inf, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},                       // +inf elsewhere
      {-inf, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11},                      // -inf target
      {1, 2, nan, nan, nan, nan, nan, 3, 4, 5, 6, inf},              // NaNs before a finite target
      {inf, inf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},                      // tied infinities
  };
  for (int64_t target : {0, 1, 4, 11}) {
    std::vector<float> values;
    for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
    const int64_t N = static_cast<int64_t>(rows.size());
    const Tensor logits = from_vector<float>(values, {N, C}, cpu);
    for (int64_t k : {1, 5}) {
      const std::vector<float> hits =
          topk_hits(logits, targets(std::vector<int64_t>(static_cast<size_t>(N), target)), k).to_vector<float>();
      for (int64_t n = 0; n < N; ++n)
        EXPECT_EQ(hits[static_cast<size_t>(n)], reference_topk_hit(rows[static_cast<size_t>(n)], target, k) ? 1.0f : 0.0f)
            << "row " << n << ", target " << target << ", k " << k;
    }
  }
  // The all-tied row: only the first five classes are top-5 hits.
  const Tensor tied = zeros({C, C}, kFloat32, cpu);
  std::vector<int64_t> every(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) every[static_cast<size_t>(c)] = c;
  const std::vector<float> hits = topk_hits(tied, targets(every), 5).to_vector<float>();
  EXPECT_EQ(hits, (std::vector<float>{1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}));
}

TEST_F(LossTest, TopkHitsErrors) {
  EXPECT_ERROR_CONTAINS(topk_hits(in({4, 6}), targets({0, 1, 2}), 5), "must be [N, C] and [N]");
  EXPECT_ERROR_CONTAINS(topk_hits(in({4}), targets({0, 1, 2, 3}), 5), "must be [N, C] and [N]");
  EXPECT_ERROR_CONTAINS(topk_hits(in({4, 6}), targets({0, 1, 2, 3}), 0), "k must be at least 1, got 0");
}

// ---- PyTorch fixtures ------------------------------------------------------------------------

#ifdef DPTRAIN_SOURCE_DIR
TEST_F(LossTest, CrossEntropyMatchesPyTorch) {
  for (const char* name : {"cross_entropy_mean", "cross_entropy_sum", "cross_entropy_ignore_mean",
                           "cross_entropy_smooth_mean", "cross_entropy_smooth_ignore_mean",
                           "cross_entropy_smooth_ignore_sum"}) {
    SCOPED_TRACE(name);
    testing::Fixture f(name);
    const std::string reduction = f.option("reduction");
    ASSERT_TRUE(reduction == "mean" || reduction == "sum") << reduction;
    Tensor logits = f.tensor("logits", cpu);
    logits.set_requires_grad(true);
    Tensor loss = cross_entropy(logits, f.tensor("target", cpu), reduction == "mean" ? Reduction::Mean : Reduction::Sum,
                                std::stoll(f.option("ignore_index")), f.option_double("label_smoothing"));
    loss.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("loss", loss, f.tensor("loss", cpu), 1e-10);
    EXPECT_TENSOR_NEAR("grad_logits", logits.grad(), f.tensor("grad_logits", cpu), 1e-10);
  }
}
#endif

}  // namespace
}  // namespace dp
