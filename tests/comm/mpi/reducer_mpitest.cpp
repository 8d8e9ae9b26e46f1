// The DDP reducer across real ranks (mpirun with 1, 2 and 4 ranks).
//
// Equivalence: N ranks with batch B each, averaging gradients, must follow the same trajectory as
// one process with batch N·B. Every rank also runs that single-process reference itself (same
// seed, the whole batch, no group) and compares its own DDP parameters with it after 20 steps.
// Then: buckets and gradient views, launch before backward ends, the one re-plan, unused
// parameters, gradient accumulation, and the model broadcast/hash checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "comm/ddp/reducer.h"
#include "comm/mpi/mpi_process_group.h"
#include "common/expect_error.h"
#include "models/registry.h"
#include "mpi_test_environment.h"
#include "optim/sgd.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/core/runtime.h"
#include "runtime/nn/linear.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/elementwise.h"

namespace dp {
namespace {

class ReducerTest : public ::testing::Test {
 protected:
  ReducerTest() : group_(std::make_unique<MpiProcessGroup>(testing::test_mpi())) {}

  int rank() const { return group_->rank(); }
  // n class labels in [0, 10), from `gen` (the same on every rank for the same seed).
  Tensor labels(int64_t n, Generator& gen) {
    const std::vector<double> u = rand({n}, gen, kFloat64, cpu_).to_vector<double>();
    std::vector<int64_t> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = std::min<int64_t>(9, static_cast<int64_t>(u[i] * 10));
    return from_vector<int64_t>(v, {n}, cpu_);
  }
  int size() const { return group_->size(); }

  std::shared_ptr<nn::Module> model(const std::string& name, uint64_t seed) {
    ModelSpec spec;
    spec.name = name;
    spec.mlp_hidden = {64, 32};
    Generator gen(seed);
    auto m = build_model(spec, cpu_, gen);
    m->train();
    return m;
  }

  // Over all parameter tensors: max |a − b| / max |b| within the tensor (relative to the
  // tensor's scale, so that entries near zero do not turn float32 rounding into large ratios).
  static double max_relative_difference(nn::Module& a, nn::Module& b) {
    const auto pa = a.named_parameters(), pb = b.named_parameters();
    double worst = 0;
    for (size_t i = 0; i < pa.size(); ++i) {
      const auto va = pa[i].second.to_vector<double>(), vb = pb[i].second.to_vector<double>();
      double diff = 0, scale = 0;
      for (size_t k = 0; k < va.size(); ++k) {
        diff = std::max(diff, std::abs(va[k] - vb[k]));
        scale = std::max(scale, std::abs(vb[k]));
      }
      worst = std::max(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
  }

  // 20 SGD steps on fixed random data: DDP over the group with batch `per_rank` each, and the
  // single-process reference with batch size()·per_rank; returns the largest relative difference.
  double ddp_matches_single_process(const std::string& name, int64_t per_rank, ReducerOptions options = {}) {
    const int64_t global = per_rank * size();
    auto ddp = model(name, 7), reference = model(name, 7);
    broadcast_model_from_rank0(*ddp, *group_);
    Reducer reducer(ddp->named_parameters(), *group_, options);
    SgdOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 1e-4;
    SGD ddp_sgd(ddp->parameters(), o), reference_sgd(reference->parameters(), o);
    Generator data(123);  // same stream on every rank
    for (int step = 0; step < 20; ++step) {
      Tensor x = randn({global, 1, 28, 28}, data, kFloat32, cpu_);
      Tensor y = labels(global, data);
      // DDP: this rank's shard of the batch.
      reducer.prepare_for_backward(true);
      cross_entropy(ddp->forward(x.narrow(0, rank() * per_rank, per_rank)),
                    y.narrow(0, rank() * per_rank, per_rank))
          .backward();
      reducer.finish();
      ddp_sgd.step();
      ddp_sgd.zero_grad(step % 2 == 0);  // both ways: set to none, and zeroed in place
      // Reference: the whole batch.
      cross_entropy(reference->forward(x), y).backward();
      reference_sgd.step();
      reference_sgd.zero_grad(true);
    }
    const double difference = max_relative_difference(*ddp, *reference);
    if (rank() == 0)
      std::printf("%s: %d rank(s) x batch %lld vs 1 x batch %lld: max relative difference %.3g\n", name.c_str(),
                  size(), static_cast<long long>(per_rank), static_cast<long long>(global), difference);
    return difference;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;
};

TEST_F(ReducerTest, MlpMatchesOneProcessWithTheWholeBatch) {
  EXPECT_LE(ddp_matches_single_process("mlp", 8), 1e-5);
}

TEST_F(ReducerTest, SmallCnnMatchesOneProcessWithTheWholeBatch) {
  EXPECT_LE(ddp_matches_single_process("small_cnn", 4), 1e-5);
}

TEST_F(ReducerTest, ManySmallBucketsMatchToo) {
  ReducerOptions options;
  options.first_bucket_bytes = 1000;
  options.bucket_bytes = 4000;
  EXPECT_LE(ddp_matches_single_process("mlp", 4, options), 1e-5);
}

// distributed.grad_dtype: bf16 (NOTE [ Compressed gradient communication ]): each rank's gradient
// is rounded to bf16, divided by the world size in bf16, summed in bf16 and widened back.
TEST_F(ReducerTest, Bf16WireFollowsPyTorchsCompressHook) {
  ReducerOptions options;
  options.wire_dtype = kBFloat16;
  options.first_bucket_bytes = 400;  // several buckets: 1000 + 37 float32 values
  options.bucket_bytes = 2000;
  Tensor w = zeros({1000}, kFloat32, cpu_).set_requires_grad(true);
  Tensor b = zeros({37}, kFloat32, cpu_).set_requires_grad(true);
  Reducer reducer({{"w", w}, {"b", b}}, *group_, options);
  EXPECT_GE(reducer.buckets().size(), 2u);
  for (const Reducer::Bucket& bucket : reducer.buckets()) EXPECT_EQ(bucket.wire.dtype(), kBFloat16);
  // Rank r's gradient is c_r (loss Σ p·c_r), from a seed every rank knows.
  auto coefficients = [&](int r, int64_t n, uint64_t salt) {
    Generator gen(1000 + 17 * static_cast<uint64_t>(r) + salt);
    return mul(randn({n}, gen, kFloat32, cpu_), 1.0 + r);
  };
  reducer.prepare_for_backward(true);
  add(sum(mul(w, coefficients(rank(), 1000, 0))), sum(mul(b, coefficients(rank(), 37, 1)))).backward();
  reducer.finish();
  for (auto [p, salt] : {std::pair{w, uint64_t(0)}, std::pair{b, uint64_t(1)}}) {
    const int64_t n = p.numel();
    const std::vector<float> got = p.grad().to_vector<float>();
    // What each rank sent: bf16(bf16(c_r) / size) (1/size is exact for 1, 2 and 4 ranks).
    std::vector<std::vector<float>> sent;
    std::vector<double> mean(n, 0.0), magnitude(n, 0.0);
    for (int r = 0; r < size(); ++r) {
      const Tensor c = coefficients(r, n, salt);
      sent.push_back(mul(c.to(kBFloat16), 1.0 / size()).to(kFloat32).to_vector<float>());
      const std::vector<float> cv = c.to_vector<float>();
      for (int64_t i = 0; i < n; ++i) mean[i] += cv[i] / size(), magnitude[i] += std::abs(cv[i]) / size();
    }
    for (int64_t i = 0; i < n; ++i) {
      // Widened from bf16: it travelled compressed.
      ASSERT_EQ(got[i], static_cast<float>(Eigen::bfloat16(got[i]))) << "element " << i;
      if (size() <= 2) {  // one addition: exactly bf16(q_0 + q_1)
        const float want = size() == 1 ? sent[0][i] : static_cast<float>(Eigen::bfloat16(sent[0][i] + sent[1][i]));
        ASSERT_EQ(got[i], want) << "element " << i;
      } else {  // summation order is MPI's: a few bf16 roundings of the terms from the float32 mean
        ASSERT_NEAR(got[i], mean[i], 4 * std::ldexp(magnitude[i], -8)) << "element " << i;
      }
    }
  }
  // And a training trajectory: 20 SGD steps stay near the float32 single-process one (the
  // difference is relative to each tensor's largest value; the small last-layer bias moves most).
  EXPECT_LE(ddp_matches_single_process("mlp", 8, options), 0.1);
}

// ReducerOptions::average = false (NOTE [ Fixed shards ] in launch/training_run.h): the bucket
// is summed over the ranks and left undivided, also when two micro-steps accumulated into it.
TEST_F(ReducerTest, WithoutAveragingTheGradientsAreSummed) {
  ReducerOptions options;
  options.average = false;
  Tensor w = zeros({300}, kFloat32, cpu_).set_requires_grad(true);
  Reducer reducer({{"w", w}}, *group_, options);
  auto coefficients = [&](int r, int micro) {
    Generator gen(500 + 31 * static_cast<uint64_t>(r) + static_cast<uint64_t>(micro));
    return randn({300}, gen, kFloat32, cpu_);
  };
  for (int micro = 0; micro < 2; ++micro) {
    reducer.prepare_for_backward(/*sync=*/micro == 1);
    sum(mul(w, coefficients(rank(), micro))).backward();
  }
  reducer.finish();
  const std::vector<float> got = w.grad().to_vector<float>();
  std::vector<float> want(300, 0.0f);
  for (int r = 0; r < size(); ++r) {
    const std::vector<float> c0 = coefficients(r, 0).to_vector<float>(), c1 = coefficients(r, 1).to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i) want[i] += c0[i] + c1[i];  // each rank's accumulation, then ranks
  }
  for (size_t i = 0; i < want.size(); ++i)
    if (size() <= 2)
      ASSERT_EQ(got[i], want[i]) << "element " << i;  // one addition across ranks: exact either way round
    else
      ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << "element " << i;
  w.set_grad(Tensor());
}

TEST_F(ReducerTest, GradientsAreViewsOfBucketsSizedAsAsked) {
  auto m = model("mlp", 1);  // layers.0 784→64, layers.2 64→32, layers.4 32→10
  ReducerOptions options;
  options.first_bucket_bytes = 2000;
  options.bucket_bytes = 100000;
  Reducer reducer(m->named_parameters(), *group_, options);
  const auto& buckets = reducer.buckets();
  ASSERT_GE(buckets.size(), 3u);
  // Reverse registration order: the last layer's parameters come first.
  EXPECT_EQ(reducer.parameters()[buckets[0].params[0]].first, "layers.4.bias");
  EXPECT_LE(buckets[0].buffer.numel() * 4, 2000);
  int64_t total = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    total += buckets[b].buffer.numel();
    // A bucket overflows its limit only when a single parameter is larger than it.
    if (buckets[b].params.size() > 1) {
      EXPECT_LE(buckets[b].buffer.numel() * 4, b == 0 ? 2000 : 100000);
    }
    for (size_t k = 0; k < buckets[b].params.size(); ++k) {
      const Tensor& p = reducer.parameters()[buckets[b].params[k]].second;
      EXPECT_EQ(p.grad().storage(), buckets[b].buffer.storage()) << reducer.parameters()[buckets[b].params[k]].first;
      // Each gradient on a kGradAlignBytes boundary (64 float32 values), the gap after it < 64.
      EXPECT_EQ(buckets[b].offsets[k] % 64, 0) << reducer.parameters()[buckets[b].params[k]].first;
      const int64_t end = k + 1 < buckets[b].params.size() ? buckets[b].offsets[k + 1] : buckets[b].buffer.numel();
      EXPECT_GE(end - buckets[b].offsets[k], p.numel());
      EXPECT_LT(end - buckets[b].offsets[k], p.numel() + 64);
    }
  }
  int64_t padded = 0;
  for (const Tensor& p : m->parameters()) padded += (p.numel() + 63) / 64 * 64;
  EXPECT_EQ(total, padded);
}

// NOTE [ Gradient homes ]: after zero_grad(set_to_none) backward writes each gradient into its
// bucket itself — the linear layers' weight gradients by the GEMM that computes them (no copy by
// anyone), the biases' (a reduction's result) copied there once by autograd — and the reducer's
// averages are those of a run that allocates fresh gradients.
TEST_F(ReducerTest, BackwardWritesGradientsStraightIntoTheBuckets) {
  auto m = model("mlp", 1);
  Reducer reducer(m->named_parameters(), *group_);
  Generator data(5);
  for (int step = 0; step < 3; ++step) {
    m->zero_grad(true);
    const Tensor x = randn({4, 1, 28, 28}, data, kFloat32, cpu_);
    const Tensor y = labels(4, data);
    std::vector<int64_t> copies_before;
    for (const auto& [name, p] : reducer.parameters())
      copies_before.push_back(std::dynamic_pointer_cast<AccumulateGrad>(gradient_edge(p))->home_copies());
    reducer.prepare_for_backward(true);
    cross_entropy(m->forward(x.narrow(0, rank() * 2 % 4, 2)), y.narrow(0, rank() * 2 % 4, 2)).backward();
    reducer.finish();
    for (size_t i = 0; i < reducer.parameters().size(); ++i) {
      const auto& [name, p] = reducer.parameters()[i];
      const int64_t copies =
          std::dynamic_pointer_cast<AccumulateGrad>(gradient_edge(p))->home_copies() - copies_before[i];
      EXPECT_EQ(p.grad().raw_data(), p.grad_home().raw_data()) << name << " step " << step;
      EXPECT_EQ(copies, p.dim() == 2 ? 0 : 1) << name << " step " << step;
    }
  }
}

TEST_F(ReducerTest, FirstBucketLaunchesBeforeBackwardEnds) {
  auto m = model("mlp", 1);
  broadcast_model_from_rank0(*m, *group_);
  ReducerOptions options;
  options.first_bucket_bytes = 1400;  // layers.4 (32→10) alone
  Reducer reducer(m->named_parameters(), *group_, options);
  reducer.prepare_for_backward(true);
  // layers.4's gradients are final long before layers.0's: by the time layers.0.weight's hook
  // fires, the first bucket's all-reduce must already have been submitted.
  uint64_t submitted_when_first_layer_ready = 0;
  const auto named = m->named_parameters();
  for (const auto& [name, p] : named) {
    if (name != "layers.0.weight") continue;
    Tensor param = p;
    param.register_grad_ready_hook([&](Tensor&) { submitted_when_first_layer_ready = group_->log().next_sequence(); });
  }
  const uint64_t before = group_->log().next_sequence();
  Generator data(5);
  cross_entropy(m->forward(randn({8, 1, 28, 28}, data, kFloat32, cpu_)), labels(8, data))
      .backward();
  const ReducerStepStats stats = reducer.finish();
  EXPECT_GT(submitted_when_first_layer_ready, before) << "no all-reduce was launched before backward reached layers.0";
  EXPECT_EQ(stats.buckets, static_cast<int>(reducer.buckets().size()));
  EXPECT_GE(stats.comm_ms, stats.exposed_ms);
  EXPECT_GE(stats.hidden_fraction, 0.0);
  EXPECT_LE(stats.hidden_fraction, 1.0);
}

TEST_F(ReducerTest, ReplansOnceFromTheObservedOrder) {
  auto m = model("small_cnn", 1);
  broadcast_model_from_rank0(*m, *group_);
  ReducerOptions options;
  options.first_bucket_bytes = 4000;
  options.bucket_bytes = 40000;
  Reducer reducer(m->named_parameters(), *group_, options);
  Generator data(5);
  for (int step = 0; step < 3; ++step) {
    reducer.prepare_for_backward(true);
    cross_entropy(m->forward(randn({4, 1, 28, 28}, data, kFloat32, cpu_)), labels(4, data))
        .backward();
    reducer.finish();
  }
  EXPECT_EQ(reducer.replans(), 1);
  // Gradients still live in the (new) buckets.
  for (const auto& b : reducer.buckets())
    for (size_t index : b.params) EXPECT_EQ(reducer.parameters()[index].second.grad().storage(), b.buffer.storage());
}

// A model whose second head is used only when asked: its parameters get no gradient otherwise.
class TwoHeads : public nn::Module {
 public:
  TwoHeads(Device device, Generator& gen) {
    a_ = register_module("a", std::make_shared<nn::Linear>(4, 2, device, gen));
    b_ = register_module("b", std::make_shared<nn::Linear>(4, 2, device, gen));
  }
  Tensor forward(const Tensor& x) override { return use_b ? b_->forward(x) + a_->forward(x) : a_->forward(x); }
  bool use_b = false;

 private:
  std::shared_ptr<nn::Linear> a_, b_;
};

TEST_F(ReducerTest, UnusedParametersAreNamedOrZeroFilled) {
  Generator gen(3);
  TwoHeads m(cpu_, gen);
  broadcast_model_from_rank0(m, *group_);
  Generator data(9);
  Tensor x = randn({3, 4}, data, kFloat32, cpu_);
  {
    Reducer strict(m.named_parameters(), *group_);
    strict.prepare_for_backward(true);
    sum(m.forward(x)).backward();
    EXPECT_ERROR_CONTAINS(strict.finish(), "b.weight, b.bias");
  }
  m.zero_grad(true);
  ReducerOptions options;
  options.find_unused_parameters = true;
  Reducer lenient(m.named_parameters(), *group_, options);
  lenient.prepare_for_backward(true);
  sum(m.forward(x)).backward();
  const ReducerStepStats stats = lenient.finish();
  EXPECT_EQ(stats.unused_parameters, 2);
  for (double v : m.named_parameters()[2].second.grad().to_vector<double>()) EXPECT_EQ(v, 0.0);
  // a.bias's gradient: each of the 3 rows contributes 1 per output, on every rank alike.
  for (double v : m.named_parameters()[1].second.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(v, 3.0);
}

// A parameter used in one step and unused in the next: its bucket slot (its gradient home) still
// holds the earlier step's averaged gradient, and find_unused_parameters must hand the optimiser
// zeros, not that. Gradients set to none between the steps, as the trainer does.
TEST_F(ReducerTest, AParameterUnusedAfterAUsedStepGetsZerosNotItsStaleGradient) {
  Generator gen(3);
  TwoHeads m(cpu_, gen);
  broadcast_model_from_rank0(m, *group_);
  Generator data(9);
  Tensor x = randn({3, 4}, data, kFloat32, cpu_);
  ReducerOptions options;
  options.find_unused_parameters = true;
  Reducer reducer(m.named_parameters(), *group_, options);
  m.use_b = true;
  for (int step = 0; step < 2; ++step) {  // the second step runs on the buckets replanned from the first
    m.zero_grad(true);
    reducer.prepare_for_backward(true);
    sum(m.forward(x)).backward();
    EXPECT_EQ(reducer.finish().unused_parameters, 0);
  }
  const Tensor b_bias = m.named_parameters()[3].second;
  for (double v : b_bias.grad().to_vector<double>()) ASSERT_DOUBLE_EQ(v, 3.0) << "b.bias after the steps using b";
  m.zero_grad(true);
  m.use_b = false;
  reducer.prepare_for_backward(true);
  sum(m.forward(x)).backward();
  EXPECT_EQ(reducer.finish().unused_parameters, 2);
  const auto params = m.named_parameters();  // b.weight, b.bias at 2 and 3
  for (size_t i : {size_t(2), size_t(3)}) {
    const auto& [name, p] = params[i];
    ASSERT_TRUE(p.grad().defined()) << name;
    for (double v : p.grad().to_vector<double>()) EXPECT_EQ(v, 0.0) << name << ": the earlier step's gradient";
  }
  for (double v : m.named_parameters()[1].second.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(v, 3.0) << "a.bias";
}

// An op's backward may give an input no gradient at all: the parameter's AccumulateGrad still
// fires its hook, with .grad unset. DDP counts that as a zero gradient (as for a parameter left
// unused), in every step — the bucket slot is zeroed, not left with the last step's values.
TEST_F(ReducerTest, AParameterAnOpGivesNoGradientGetsZeros) {
  Generator gen(5);
  Tensor w = randn({4}, gen, kFloat32, cpu_).set_requires_grad(true);
  Tensor gate = randn({4}, gen, kFloat32, cpu_).set_requires_grad(true);
  Reducer reducer({{"w", w}, {"gate", gate}}, *group_);
  const Tensor x = full({4}, rank() + 1.0, kFloat32, cpu_);
  for (int step = 0; step < 3; ++step) {
    w.set_grad(Tensor());
    gate.set_grad(Tensor());
    if (step == 2) gate.set_grad(full({4}, 7.0, kFloat32, cpu_));  // a gradient from elsewhere is kept
    reducer.prepare_for_backward(true);
    const Tensor wx = mul(w, x);
    Tensor out;
    {
      NoGradGuard no_grad;
      out = mul(wx, 1.0);
    }
    record("gradient_for_the_first_input_only", out, {wx, gate},
           [](const Tensor& g, const Node&) { return std::vector<Tensor>{g, Tensor()}; });
    sum(out).backward();
    reducer.finish();
    const double mean_x = (size() + 1) / 2.0;  // the average over ranks of rank + 1
    for (double v : w.grad().to_vector<double>()) EXPECT_DOUBLE_EQ(v, mean_x) << "w, step " << step;
    ASSERT_TRUE(gate.grad().defined()) << "step " << step;
    for (double v : gate.grad().to_vector<double>()) EXPECT_EQ(v, step == 2 ? 7.0 : 0.0) << "gate, step " << step;
  }
}

// Two micro-steps a step, after zero_grad(set_to_none) as the trainer does: the first micro-step's
// backward writes each gradient into its home (overwriting what the step before left there; the
// second step also replans the buckets from the first's order), the second adds to it, and only
// the synchronised one communicates.
TEST_F(ReducerTest, AccumulationStepsCommunicateOnlyWhenSynchronised) {
  auto m = model("mlp", 2);
  broadcast_model_from_rank0(*m, *group_);
  Reducer reducer(m->named_parameters(), *group_);
  Generator data(11);
  Tensor x = randn({4, 1, 28, 28}, data, kFloat32, cpu_);
  Tensor y = labels(4, data);
  for (int step = 0; step < 3; ++step) {
    m->zero_grad(true);
    const uint64_t before = group_->log().next_sequence();
    reducer.prepare_for_backward(false);
    cross_entropy(m->forward(x), y).backward();
    EXPECT_EQ(group_->log().next_sequence(), before) << "a non-synchronised micro-step communicated, step " << step;
    reducer.prepare_for_backward(true);
    cross_entropy(m->forward(x), y).backward();
    reducer.finish();
    if (step == 0) {
      EXPECT_EQ(group_->log().next_sequence(), before + reducer.buckets().size());
    }
  }
  // Same inputs on every rank: the average of two accumulated micro-steps is twice one step's
  // gradient, which a fresh single backward gives.
  auto fresh = model("mlp", 2);
  broadcast_model_from_rank0(*fresh, *group_);
  cross_entropy(fresh->forward(x), y).backward();
  const auto params = m->named_parameters(), fresh_params = fresh->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto got = params[i].second.grad().to_vector<double>();
    const auto one = fresh_params[i].second.grad().to_vector<double>();
    double worst = 0;
    for (size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::abs(got[k] - 2 * one[k]));
    EXPECT_LE(worst, 1e-5) << params[i].first << ": not twice one micro-step's gradient";
  }
}

TEST_F(ReducerTest, BroadcastMakesEveryRankStartFromRankZero) {
  auto m = model("mlp", 100 + rank());  // different initialisation on each rank
  broadcast_model_from_rank0(*m, *group_);
  auto rank0 = model("mlp", 100);
  EXPECT_EQ(max_relative_difference(*m, *rank0), 0.0);
}

TEST_F(ReducerTest, DifferentModelsAreRefusedNamingTheRank) {
  if (size() < 2) GTEST_SKIP() << "needs two ranks to differ";
  ModelSpec spec;
  spec.name = "mlp";
  spec.mlp_hidden = {rank() == size() - 1 ? int64_t(16) : int64_t(32)};
  Generator gen(1);
  auto m = build_model(spec, cpu_, gen);
  EXPECT_ERROR_CONTAINS(broadcast_model_from_rank0(*m, *group_),
                        "rank(s) " + std::to_string(size() - 1) + " built a different model");
}

TEST_F(ReducerTest, BufferSyncAveragesOrBroadcasts) {
  auto m = model("resnet18", 1);
  const auto buffers = m->named_buffers();
  Tensor mean = buffers[0].second;  // bn1.running_mean
  {
    NoGradGuard no_grad;
    mean.fill_(rank());
  }
  sync_buffers(*m, *group_, BufferSync::Average);
  for (double v : mean.to_vector<double>()) EXPECT_DOUBLE_EQ(v, (size() - 1) / 2.0);
  {
    NoGradGuard no_grad;
    mean.fill_(rank() + 1);
  }
  sync_buffers(*m, *group_, BufferSync::Broadcast);
  for (double v : mean.to_vector<double>()) EXPECT_DOUBLE_EQ(v, 1.0);
}

}  // namespace
}  // namespace dp
