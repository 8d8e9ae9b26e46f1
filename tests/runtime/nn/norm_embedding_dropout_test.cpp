// BatchNorm2d, LayerNorm, Embedding and Dropout modules: registration as torch, init, and the
// behaviour each module adds on top of its op (running statistics, padding row, train/eval).
#include <gtest/gtest.h>

#include "nn_test_util.h"

#include <cmath>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/nn/batchnorm.h"
#include "runtime/nn/dropout.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/layernorm.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/reduce.h"

namespace dp::nn {
namespace {

class NormEmbeddingDropoutTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{17};
};

TEST_F(NormEmbeddingDropoutTest, BatchNormRegistersLikeTorch) {
  BatchNorm2d bn(3, cpu);
  EXPECT_EQ(names_of(bn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names_of(bn.named_buffers()),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.weight.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.bias.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_mean.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(bn.running_var.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.momentum, 0.1);
  EXPECT_EQ(bn.eps, 1e-5);
  EXPECT_TRUE(BatchNorm2d(3, cpu, 1e-5, 0.1, /*affine=*/false).named_parameters().empty());
}

// Training normalises with batch statistics and moves the running ones by momentum 0.1
// (unbiased variance); eval uses the running ones and changes nothing.
TEST_F(NormEmbeddingDropoutTest, BatchNormTrainingAndEval) {
  BatchNorm2d bn(2, cpu, 1e-5, 0.1, true, kFloat64);
  Tensor x = randn({4, 2, 3, 3}, gen, kFloat64, cpu, 1.5, 2.0);
  const std::vector<double> xs = x.to_vector<double>();
  std::vector<double> mean(2, 0), var(2, 0);  // per channel over N·H·W = 36
  for (int64_t i = 0; i < 72; ++i) mean[(i / 9) % 2] += xs[i] / 36;
  for (int64_t i = 0; i < 72; ++i) var[(i / 9) % 2] += (xs[i] - mean[(i / 9) % 2]) * (xs[i] - mean[(i / 9) % 2]);

  const std::vector<double> y = bn.forward(x).to_vector<double>();
  for (int64_t i = 0; i < 72; ++i) {
    const int c = (i / 9) % 2;
    EXPECT_NEAR(y[i], (xs[i] - mean[c]) / std::sqrt(var[c] / 36 + 1e-5), 1e-10);
  }
  const std::vector<double> rm = bn.running_mean.to_vector<double>(), rv = bn.running_var.to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    EXPECT_NEAR(rm[c], 0.1 * mean[c], 1e-12);
    EXPECT_NEAR(rv[c], 0.9 + 0.1 * var[c] / 35, 1e-12);
  }
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);

  bn.eval();
  const std::vector<double> rm2 = bn.running_mean.to_vector<double>(), rv2 = bn.running_var.to_vector<double>();
  const std::vector<double> ye = bn.forward(x).to_vector<double>();
  for (int64_t i = 0; i < 72; ++i) {
    const int c = (i / 9) % 2;
    EXPECT_NEAR(ye[i], (xs[i] - rm2[c]) / std::sqrt(rv2[c] + 1e-5), 1e-10);
  }
  EXPECT_EQ(bn.running_mean.to_vector<double>(), rm2);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  EXPECT_THROW(bn.forward(zeros({4, 3, 2, 2}, kFloat64, cpu)), Error);  // wrong channel count
}

// A checkpoint load writes num_batches_tracked in place; counting must continue from there.
TEST_F(NormEmbeddingDropoutTest, BatchNormCountsOnFromALoadedBatchCount) {
  BatchNorm2d bn(2, cpu, 1e-5, 0.1, true, kFloat64);
  Tensor x = randn({2, 2, 3, 3}, gen, kFloat64, cpu);
  bn.forward(x);
  bn.num_batches_tracked.copy_(from_vector<int64_t>({41}, {}, cpu));
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 42);
  bn.forward(x);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 43);
}

// Frozen running statistics (NOTE [ Fixed shards ]): the forward is the same, bit for bit, and
// running_mean, running_var and num_batches_tracked stay as they were; thawed, counting resumes.
TEST_F(NormEmbeddingDropoutTest, BatchNormWithFrozenRunningStatsNormalisesAndLeavesThemAlone) {
  BatchNorm2d bn(3, cpu), twin(3, cpu);
  Tensor x = randn({4, 3, 5, 5}, gen, kFloat32, cpu, 0.5, 2.0);
  twin.forward(x);  // moved once: not the initial values
  bn.forward(x);
  const std::vector<float> rm = bn.running_mean.to_vector<float>(), rv = bn.running_var.to_vector<float>();
  bn.set_running_stats_frozen(true);
  EXPECT_TRUE(bn.running_stats_frozen());
  const Tensor x2 = randn({4, 3, 5, 5}, gen, kFloat32, cpu, -1.0, 3.0);
  EXPECT_EQ(bn.forward(x2).to_vector<float>(), twin.forward(x2).to_vector<float>());
  EXPECT_EQ(bn.running_mean.to_vector<float>(), rm);
  EXPECT_EQ(bn.running_var.to_vector<float>(), rv);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_NE(twin.running_mean.to_vector<float>(), rm) << "the unfrozen twin moved";
  bn.set_running_stats_frozen(false);
  bn.forward(x2);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
}

TEST_F(NormEmbeddingDropoutTest, LayerNormNormalisesTrailingDims) {
  LayerNorm ln({4}, cpu, 1e-5, true, kFloat64);
  EXPECT_EQ(names_of(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  const std::vector<double> y = ln.forward(randn({3, 4}, gen, kFloat64, cpu, 2.0, 3.0)).to_vector<double>();
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 4; ++k) m += y[r * 4 + k] / 4;
    for (int k = 0; k < 4; ++k) v += (y[r * 4 + k] - m) * (y[r * 4 + k] - m) / 4;
    EXPECT_NEAR(m, 0.0, 1e-12);
    EXPECT_NEAR(v, 1.0, 1e-4);  // eps shifts it slightly below 1
  }
}

TEST_F(NormEmbeddingDropoutTest, EmbeddingInitLookupAndPaddingRow) {
  Embedding big(1000, 64, cpu, gen);
  const std::vector<float> w = big.weight.to_vector<float>();
  double m = 0, v = 0;
  for (float x : w) m += x / static_cast<double>(w.size());
  for (float x : w) v += (x - m) * (x - m) / static_cast<double>(w.size() - 1);
  EXPECT_NEAR(m, 0.0, 0.02);  // N(0, 1) over 64000 draws
  EXPECT_NEAR(v, 1.0, 0.03);

  Embedding emb(5, 3, cpu, gen, /*padding_idx=*/2, kFloat64);
  const std::vector<double> table = emb.weight.to_vector<double>();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(table[2 * 3 + k], 0.0);
  Tensor indices = from_vector<int64_t>({4, 2, 4, 0}, {2, 2}, cpu);
  Tensor out = emb.forward(indices);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  const std::vector<double> rows = out.to_vector<double>();
  for (int k = 0; k < 3; ++k) EXPECT_EQ(rows[k], table[4 * 3 + k]);
  sum(out).backward();
  const std::vector<double> g = emb.weight.grad().to_vector<double>();
  EXPECT_EQ(std::vector<double>(g.begin() + 12, g.end()), std::vector<double>(3, 2.0));  // row 4 used twice
  EXPECT_EQ(std::vector<double>(g.begin() + 6, g.begin() + 9), std::vector<double>(3, 0.0));  // padding row
  EXPECT_THROW(emb.forward(from_vector<int32_t>({1}, {1}, cpu)), Error);
}

TEST_F(NormEmbeddingDropoutTest, DropoutMasksInTrainingOnly) {
  Generator mask_gen(5);
  Dropout drop(0.5, mask_gen);
  Tensor x = ones({10000}, kFloat32, cpu);
  const std::vector<float> y = drop.forward(x).to_vector<float>();
  int64_t zeros_seen = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == 2.0f) << v;  // kept values scaled by 1/(1-p)
    zeros_seen += v == 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 10000.0, 0.5, 0.03);
  EXPECT_GT(mask_gen.offset(), 0u);  // masks come from the generator it was given
  drop.eval();
  EXPECT_EQ(drop.forward(x).to_vector<float>(), std::vector<float>(10000, 1.0f));
  EXPECT_THROW(Dropout(1.0, mask_gen), Error);
}

}  // namespace
}  // namespace dp::nn
