// NOTE [ Summing into a pending gradient ] (runtime/autograd/engine.h): a convolution or linear
// layer adds its input gradient into the gradient already waiting for that input, when nothing
// but the engine holds it; the engine then adds nothing. Gradients are those of a backward
// without the offers (BackwardOptions::sum_in_place = false) up to rounding, and BackwardStats
// says which sums were made where.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/gpu_test.h"
#include "models/bert.h"
#include "models/resnet.h"
#include "runtime/autograd/autocast.h"
#include "runtime/autograd/engine.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/generator.h"

namespace dp {
namespace {

// Runs loss() backward on `device` with and without the offers; checks that every tensor in
// `leaves` gets the same gradient within `tol` (relative to the gradient's largest magnitude),
// and returns the stats of the run with the offers (and of the one without in `without`).
BackwardStats compare_backward(Device device, const std::vector<Tensor>& leaves, const std::function<Tensor()>& loss,
                               double tol, BackwardStats* without = nullptr) {
  CpuBackend host_backend(1);
  const Device host(&host_backend);
  std::vector<std::vector<double>> reference;
  for (Tensor leaf : leaves) leaf.set_grad(Tensor());
  Tensor l = loss();
  BackwardOptions off;
  off.sum_in_place = false;
  const BackwardStats plain = run_backward(l, ones(l.shape(), l.dtype(), device), off);
  if (without) *without = plain;
  EXPECT_EQ(plain.sums_in_place, 0);
  for (Tensor leaf : leaves) {
    reference.push_back(leaf.grad().to(host).to(kFloat64).to_vector<double>());
    leaf.set_grad(Tensor());
  }
  l = loss();
  const BackwardStats stats = run_backward(l, ones(l.shape(), l.dtype(), device));
  // Every sum is made once, by one side or the other.
  EXPECT_EQ(stats.sums + stats.sums_in_place, plain.sums);
  // Each gradient against its own largest magnitude, but no finer than a thousandth of the
  // largest of all: a gradient that is zero up to rounding (BERT's key bias: softmax ignores a
  // score shift per query) is all noise, at the scale of the values it was summed from.
  double all_scale = 0;
  for (const auto& r : reference)
    for (double v : r) all_scale = std::max(all_scale, std::abs(v));
  EXPECT_GT(all_scale, 0) << "a vacuous comparison";
  for (size_t i = 0; i < leaves.size(); ++i) {
    const std::vector<double> got = leaves[i].grad().to(host).to(kFloat64).to_vector<double>();
    double scale = 1e-3 * all_scale;
    for (double v : reference[i]) scale = std::max(scale, std::abs(v));
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_NEAR(got[j], reference[i][j], tol * scale) << "leaf " << i << " " << leaves[i].str() << ", element " << j;
  }
  return stats;
}

// Every residual sum of a ResNet is made in place: one per block, none left to the engine (the
// fused bn-add-relu's residual gradient is the pending one; the block's first convolution, or
// the downsample's, adds into it).
void expect_resnet_residual_sums_in_place(Device device, Generator& gen, bool bf16_channels_last) {
  struct Case {
    const char* name;
    std::shared_ptr<ResNet> (*make)(int64_t, int64_t, Device, Generator&, bool);
    int64_t blocks;
  };
  for (const Case& c : {Case{"resnet18", resnet18, 8}, Case{"resnet50", resnet50, 16}}) {
    SCOPED_TRACE(std::string(c.name) + " on " + device.str() +
                 (bf16_channels_last ? ", bfloat16 autocast, channels-last" : ", float32 NCHW"));
    auto model = c.make(10, 3, device, gen, false);
    Tensor x = randn({2, 3, 32, 32}, gen, kFloat32, device);
    if (bf16_channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    CpuBackend host_backend(1);
    const Tensor y = from_vector<int64_t>({3, 7}, {2}, Device(&host_backend)).to(device);
    std::vector<Tensor> params;
    for (auto& [name, p] : model->named_parameters()) params.push_back(p);
    const auto loss = [&] {
      AutocastGuard autocast(bf16_channels_last ? kBFloat16 : kFloat32);
      return cross_entropy(model->forward(x), y);
    };
    // bf16 rounds every backward op; on a GPU the two runs may also differ in cuDNN's algorithms
    // (chosen by timing, separately for the calls that add into dx) and their atomics. A CPU probe
    // that nudged the rounding reached 0.76 of 0.05; a GPU run gets twice that margin.
    const double bf16_tol = device.is_cpu() ? 0.05 : 0.1;
    const BackwardStats stats = compare_backward(device, params, loss, bf16_channels_last ? bf16_tol : 1e-4);
    EXPECT_EQ(stats.sums, 0);
    EXPECT_EQ(stats.sums_in_place, c.blocks);
  }
}

class PendingSumTest : public ::testing::Test {
 protected:
  BackwardStats compare(const std::vector<Tensor>& leaves, const std::function<Tensor()>& loss, double tol,
                        BackwardStats* without = nullptr) {
    return compare_backward(cpu, leaves, loss, tol, without);
  }

  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{31};
};

// A residual block's shape: x feeds a convolution and, later, the residual path; the residual's
// gradient arrives first and the convolution adds its input gradient into it.
TEST_F(PendingSumTest, ConvolutionAddsIntoTheResidualsGradient) {
  for (DType dtype : {kFloat32, kFloat64}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
      const std::string what = std::string(dtype_name(dtype)) +
                               (format == MemoryFormat::ChannelsLast ? ", channels-last" : ", NCHW");
      Tensor x0 = randn({2, 8, 6, 6}, gen, dtype, cpu).contiguous(format).set_requires_grad(true);
      Tensor w = randn({8, 8, 3, 3}, gen, dtype, cpu).set_requires_grad(true);
      Conv2dParams p;
      p.pad_h = p.pad_w = 1;
      const Tensor r1 = randn({2, 8, 6, 6}, gen, dtype, cpu), r2 = randn({2, 8, 6, 6}, gen, dtype, cpu);
      const auto loss = [&] {
        const Tensor x = mul(x0, 1.5);  // a non-leaf, as a block's input is
        const Tensor convs = add(mul(conv2d(x, w, Tensor(), p), r1), mul(conv2d(x, w, Tensor(), p), r2));
        return sum(add(convs, relu(x)));
      };
      BackwardStats plain;
      const BackwardStats stats = compare({x0, w}, loss, dtype == kFloat64 ? 1e-13 : 1e-5, &plain);
      SCOPED_TRACE(what);
      // x gets three gradients: relu's first (its node is the latest), then both convolutions
      // add theirs into it; w's two are summed by the engine.
      EXPECT_EQ(plain.sums, 2 + 1);
      EXPECT_EQ(stats.sums_in_place, 2);
      EXPECT_EQ(stats.sums, 1);
    }
  }
}

// A gradient the engine handed to two nodes (add's backward returns one tensor for both inputs)
// is not offered while the other still holds it: writing into it would change the other's
// input. Here h's first gradient is out's, shared with the branch through the projections; the
// key projection (run first) must make a fresh one, the query projection may then add into it.
TEST_F(PendingSumTest, AGradientSharedWithAnotherNodeIsNotOffered) {
  Tensor h0 = randn({5, 6}, gen, kFloat32, cpu).set_requires_grad(true);
  Tensor wq = randn({6, 6}, gen, kFloat32, cpu).set_requires_grad(true);
  Tensor wk = randn({6, 6}, gen, kFloat32, cpu).set_requires_grad(true);
  const Tensor weights = randn({5, 6}, gen, kFloat32, cpu);
  const auto loss = [&] {
    const Tensor h = mul(h0, 2.0);
    return sum(mul(add(add(linear(h, wq, Tensor()), linear(h, wk, Tensor())), h), weights));
  };
  const BackwardStats stats = compare({h0, wq, wk}, loss, 1e-6);
  EXPECT_EQ(stats.sums, 1);          // key's gradient onto the shared one
  EXPECT_EQ(stats.sums_in_place, 1);  // query's into that sum
}

// One tensor returned for two edges into the same node (add(h, h)) is two contributions.
TEST_F(PendingSumTest, OneGradientForTwoEdgesIsStillTwoContributions) {
  Tensor x0 = randn({7}, gen, kFloat32, cpu).set_requires_grad(true);
  const Tensor h = mul(x0, 1.5);
  const Tensor l = sum(add(h, h));
  const BackwardStats stats = run_backward(l, ones(l.shape(), l.dtype(), cpu));
  EXPECT_EQ(stats.sums, 1);
  EXPECT_EQ(stats.sums_in_place, 0);
  for (float g : x0.grad().to_vector<float>()) EXPECT_EQ(g, 3.0f);
}

TEST_F(PendingSumTest, EveryResidualSumOfAResNetIsMadeInPlace) {
  expect_resnet_residual_sums_in_place(cpu, gen, false);
  expect_resnet_residual_sums_in_place(cpu, gen, true);
}

class PendingSumCudaTest : public testing::GpuTest {
 protected:
  Generator gen{31};
};

// The same on a GPU: cuDNN's backward data with beta = 1 (channels-last bf16 as ResNet-50 trains).
TEST_F(PendingSumCudaTest, EveryResidualSumOfAResNetIsMadeInPlace) {
  expect_resnet_residual_sums_in_place(gpu_, gen, false);
  expect_resnet_residual_sums_in_place(gpu_, gen, true);
}

// In a BERT layer the attention's input gets four gradients (the residual's, then the value, key
// and query projections'), the feed-forward's input two; the last hidden state one from the
// pooler (its slice's gradient, a fresh tensor) and then the MLM head's; the tied word
// embedding one from the decoder and then the lookup's scatter. The engine sums nothing.
TEST_F(PendingSumTest, EveryResidualAndProjectionSumOfBertIsMadeInPlace) {
  BertConfig c = BertConfig::preset("tiny", 96);  // 2 layers, hidden 128
  c.max_position_embeddings = 16;
  c.next_sentence = true;
  BertForPreTraining model(c, cpu, gen);
  model.eval();  // no dropout: both runs see the same network
  BertInputs in;
  in.input_ids = from_vector<int64_t>({5, 17, 33, 2, 90, 1, 7, 64, 12, 3}, {2, 5}, cpu);
  in.token_type_ids = from_vector<int64_t>({0, 0, 0, 1, 1, 0, 0, 1, 1, 1}, {2, 5}, cpu);
  std::vector<Tensor> params;
  for (auto& [name, p] : model.named_parameters()) params.push_back(p);
  const Tensor weights = randn({2, 5, c.vocab_size}, gen, kFloat32, cpu);
  const auto loss = [&] {
    const Tensor hidden = model.bert->encode(in);
    const Tensor mlm = sum(mul(model.mlm_logits(hidden), weights));
    const Tensor nsp = sum(model.nsp_logits(hidden));  // later: its backward runs first
    return add(mlm, nsp);
  };
  const BackwardStats stats = compare(params, loss, 1e-5);
  EXPECT_EQ(stats.sums_in_place, c.num_hidden_layers * (3 + 1) + 1 + 1);
  EXPECT_EQ(stats.sums, 0);
}

}  // namespace
}  // namespace dp
