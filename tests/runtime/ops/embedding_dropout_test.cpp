#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/dropout.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/embedding.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

class EmbeddingDropoutTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{5};
  Tensor in(const Shape& s, double lo = -1, double hi = 1) { return random_input(s, gen, cpu, lo, hi); }
  Tensor indices(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape, cpu); }
};

// ---- embedding -------------------------------------------------------------------------------

TEST_F(EmbeddingDropoutTest, EmbeddingGathersRowsForAnyIndexShape) {
  Tensor weight = from_vector<double>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}, cpu);
  Tensor out = embedding(indices({3, 0, 3, 1, 2, 2}, {2, 3}), weight);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(out.to_vector<double>(), (std::vector<double>{30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21}));
}

TEST_F(EmbeddingDropoutTest, EmbeddingGradcheckWithRepeatedIndicesAndNoncontiguousWeight) {
  Tensor idx = indices({4, 1, 4, 0, 2, 4}, {3, 2});
  auto fn = [idx](const std::vector<Tensor>& v) { return embedding(idx, v[0]); };
  EXPECT_GRADCHECK(gradcheck(fn, {in({5, 3})}));
  EXPECT_GRADCHECK(gradcheck(fn, {noncontiguous_copy(in({5, 3}))}));
}

// The padding row is read in forward but receives no gradient (so no finite-difference check:
// that is the point); every other row gets the sum of its upstream rows.
TEST_F(EmbeddingDropoutTest, EmbeddingPaddingRowGetsNoGradient) {
  Tensor weight = in({4, 2});
  Tensor idx = indices({1, 3, 1, 0, 3}, {5});
  Tensor out = embedding(idx, weight, /*padding_idx=*/3);
  EXPECT_EQ(out.to_vector<double>()[2], weight.to_vector<double>()[6]);  // row 3 is still looked up
  Tensor upstream = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {5, 2}, cpu);
  out.backward(upstream);
  EXPECT_EQ(weight.grad().to_vector<double>(), (std::vector<double>{7, 8, 1 + 5, 2 + 6, 0, 0, 0, 0}));
}

TEST_F(EmbeddingDropoutTest, EmbeddingBackwardThreadedMatchesSerial) {
  // 4096 x 16 rows (above the parallel grain) into a 50-row vocabulary, many repeats.
  std::vector<int64_t> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i * 31 % 50);
  Tensor idx = indices(v, {4096});
  Tensor upstream = rand({4096, 16}, gen, kFloat64, cpu, -1, 1);
  auto grad_with = [&](Backend& b) {
    Device dev(&b);
    Tensor w = zeros({50, 16}, kFloat64, dev);
    w.set_requires_grad(true);
    embedding(idx.to(dev), w, 7).backward(upstream.to(dev));
    return w.grad().to_vector<double>();
  };
  CpuBackend serial(1);
  EXPECT_EQ(grad_with(backend), grad_with(serial));  // same order of additions: bit-identical
}

TEST_F(EmbeddingDropoutTest, EmbeddingErrors) {
  Tensor weight = in({10, 3});
  EXPECT_ERROR_CONTAINS(embedding(indices({1, 10}, {2}), weight),
                        "embedding: index 10 (position 1) is out of range for a weight of 10 rows");
  EXPECT_ERROR_CONTAINS(embedding(indices({-1}, {1}), weight), "index -1 (position 0)");
  EXPECT_ERROR_CONTAINS(embedding(indices({1}, {1}).to(kFloat64), weight), "indices must be int64");
  EXPECT_ERROR_CONTAINS(embedding(indices({1}, {1}), in({10})), "weight must be [num_embeddings, embedding_dim]");
  EXPECT_ERROR_CONTAINS(embedding(indices({1}, {1}), weight, 10), "padding_idx 10 is out of range");
}

// ---- dropout ---------------------------------------------------------------------------------

TEST_F(EmbeddingDropoutTest, DropoutGradientIsTheScaledMask) {
  const double p = 0.3;
  Tensor x = in({40, 25}, 0.5, 1.5);  // nonzero, so y / x recovers the scaled mask
  Generator g(123);
  Tensor y = dropout(x, p, true, g);
  sum(y).backward();
  const std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>(), grad = x.grad().to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double scaled_mask = ys[i] / xs[i];
    ASSERT_TRUE(std::abs(scaled_mask) < 1e-15 || std::abs(scaled_mask - 1 / (1 - p)) < 1e-12) << scaled_mask;
    EXPECT_NEAR(grad[i], scaled_mask, 1e-12) << "element " << i;
  }
}

TEST_F(EmbeddingDropoutTest, DropoutGradcheckWithFixedGenerator) {
  auto fn = [](const std::vector<Tensor>& v) {
    Generator g(77);  // the same mask on every call
    return dropout(v[0], 0.4, true, g);
  };
  EXPECT_GRADCHECK(gradcheck(fn, {in({6, 5})}));
  EXPECT_GRADCHECK(gradcheck(fn, {noncontiguous_copy(in({6, 5}))}));
}

TEST_F(EmbeddingDropoutTest, DropoutKeepsAboutOneMinusPAndPreservesTheMean) {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE(p);
    Generator g(2024);
    const std::vector<double> y = dropout(ones({n}, kFloat64, cpu), p, true, g).to_vector<double>();
    int64_t kept = 0;
    double total = 0;
    for (double v : y) {
      kept += v != 0;
      total += v;
    }
    // Binomial(n, 1-p): 5 standard deviations.
    const double sd = std::sqrt(n * p * (1 - p));
    EXPECT_NEAR(static_cast<double>(kept), n * (1 - p), 5 * sd);
    EXPECT_NEAR(total / n, 1.0, 5 * sd / (n * (1 - p)));
  }
}

TEST_F(EmbeddingDropoutTest, DropoutMaskDependsOnTheGeneratorOnly) {
  Tensor x = ones({1000}, kFloat32, cpu);
  Generator a(9), b(9);
  const std::vector<float> first = dropout(x, 0.5, true, a).to_vector<float>();
  EXPECT_EQ(first, dropout(x, 0.5, true, b).to_vector<float>());  // same seed and offset
  EXPECT_EQ(a.offset(), 1000u);                                   // one counter per element
  EXPECT_NE(first, dropout(x, 0.5, true, a).to_vector<float>());  // the stream advanced
}

// NOTE [ Random numbers in CUDA graphs ]: counters relative to a base tensor, plus the base the
// kernel reads, draw what absolute counters draw; a "replay" with the base set to the stream's
// next offset continues it exactly.
TEST_F(EmbeddingDropoutTest, RelativeCountersPlusTheBaseDrawWhatAbsoluteCountersDraw) {
  Tensor x = ones({300}, kFloat32, cpu), y = ones({7, 11}, kFloat32, cpu);
  Generator absolute(4), relative(4);
  (void)dropout(x, 0.5, true, absolute);  // both streams already advanced
  (void)dropout(x, 0.5, true, relative);
  // Two "steps" eagerly on one stream.
  std::vector<std::vector<float>> eager;
  for (int step = 0; step < 2; ++step) {
    eager.push_back(dropout(x, 0.3, true, absolute).to_vector<float>());
    eager.push_back(dropout(y, 0.6, true, absolute).to_vector<float>());
  }
  // The other stream "captures" the step relative to a base, then "replays" it twice.
  Tensor base = zeros({1}, kInt64, cpu);
  relative.begin_relative(base);
  EXPECT_EQ(relative.offset(), 0u);
  EXPECT_TRUE(relative.offset_base().same(base));
  const uint64_t before = 300;
  EXPECT_ERROR_CONTAINS(relative.begin_relative(base), "already relative");
  EXPECT_ERROR_CONTAINS(relative.set_state(1, 2), "during a relative");
  Tensor xm, ym;
  auto step = [&] {
    xm = dropout(x, 0.3, true, relative);
    ym = dropout(y, 0.6, true, relative);
  };
  const uint64_t drawn = [&] {
    step();  // with base 0: the counters from the capture's start, not the stream's
    return relative.end_relative();
  }();
  EXPECT_EQ(drawn, 300u + 77u);
  EXPECT_EQ(relative.offset(), before);  // back where the capture began
  EXPECT_FALSE(relative.offset_base().defined());
  EXPECT_NE(xm.to_vector<float>(), eager[0]);
  for (int replay = 0; replay < 2; ++replay) {
    base.fill_(static_cast<double>(relative.reserve(drawn)));
    relative.begin_relative(base);  // the "graph" draws the same relative counters again
    step();
    relative.end_relative();
    EXPECT_EQ(xm.to_vector<float>(), eager[2 * replay]) << "replay " << replay;
    EXPECT_EQ(ym.to_vector<float>(), eager[2 * replay + 1]) << "replay " << replay;
  }
  EXPECT_EQ(relative.offset(), absolute.offset());
  Generator g(1);
  EXPECT_ERROR_CONTAINS(g.end_relative(), "without begin_relative");
  EXPECT_ERROR_CONTAINS(g.begin_relative(zeros({1}, kFloat32, cpu)), "the base must be one int64");
  EXPECT_ERROR_CONTAINS(backend.random(ones({3}, kFloat32, cpu), RandomDist::Uniform, 0, 1, 1, 0, zeros({2}, kInt64, cpu)),
                        "random: offset_base must be one int64");
}

TEST_F(EmbeddingDropoutTest, DropoutIsIdentityInEvalOrWithZeroP) {
  Tensor x = in({3, 4});
  Generator g(1);
  EXPECT_TRUE(dropout(x, 0.5, false, g).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, g).same(x));
  EXPECT_EQ(g.offset(), 0u);  // no random numbers drawn
}

TEST_F(EmbeddingDropoutTest, DropoutRejectsPOutsideZeroOne) {
  Tensor x = in({3});
  Generator g(1);
  EXPECT_ERROR_CONTAINS(dropout(x, 1.0, true, g),
                        "dropout: p (the probability of zeroing an element) must be in [0, 1), got 1");
  EXPECT_ERROR_CONTAINS(dropout(x, -0.1, false, g), "must be in [0, 1)");
}

}  // namespace
}  // namespace dp
