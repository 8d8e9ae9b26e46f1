// Synchronised BatchNorm across real ranks (mpirun with 1, 2 and 4 ranks).
//
// Every rank takes its contiguous slice of one fixed global batch (the same generator on every
// rank) and compares what SyncBatchNorm gives it with plain BatchNorm2d run by one process over
// the whole batch, which every rank computes locally as the reference. The data have a mean of
// 3 and a standard deviation of 1 per channel, so a shard's statistics differ clearly from the
// global ones: each check also asserts (with 2 and 4 ranks) that per-rank statistics would have
// failed it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "comm/ddp/reducer.h"
#include "comm/ddp/sync_batch_norm.h"
#include "comm/mpi/mpi_process_group.h"
#include "common/expect_error.h"
#include "mpi_test_environment.h"
#include "optim/sgd.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/core/runtime.h"
#include "runtime/nn/activation.h"
#include "runtime/nn/batchnorm.h"
#include "runtime/nn/conv2d.h"
#include "runtime/nn/flatten.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/sequential.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

constexpr int64_t kGlobal = 8, kChannels = 5, kH = 3, kW = 4;

// max |a − b| / max |b|: relative to the tensor's scale, so entries near zero do not turn float32
// rounding into large ratios.
double relative_difference(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  EXPECT_EQ(va.size(), vb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

class SyncBatchNormTest : public ::testing::Test {
 protected:
  SyncBatchNormTest() : group_(std::make_unique<MpiProcessGroup>(testing::test_mpi())) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  int64_t per_rank() const { return kGlobal / size(); }
  Tensor my_slice(const Tensor& global) const { return global.narrow(0, rank() * per_rank(), per_rank()); }

  // The global batch [8, 5, 3, 4]: 3 + N(0, 1), the same on every rank for the same generator.
  Tensor batch(Generator& gen, DType dtype = kFloat32) const {
    return randn({kGlobal, kChannels, kH, kW}, gen, kFloat32, cpu_, 3.0, 1.0).to(dtype);
  }

  // A BatchNorm2d with non-trivial affine parameters (the same on every rank and in every call).
  std::unique_ptr<nn::BatchNorm2d> batch_norm() const {
    auto bn = std::make_unique<nn::BatchNorm2d>(kChannels, cpu_);
    Generator gen(11);
    NoGradGuard no_grad;
    bn->weight.copy_(randn({kChannels}, gen, kFloat32, cpu_, 1.0, 0.5));
    bn->bias.copy_(randn({kChannels}, gen, kFloat32, cpu_, 0.0, 0.5));
    return bn;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;  // dedicated to the batch statistics
};

TEST_F(SyncBatchNormTest, ConvertKeepsNamesAndCountsLayers) {
  Generator gen(1);
  nn::Sequential model({std::make_shared<nn::Conv2d>(3, 4, 3, cpu_, gen), std::make_shared<nn::BatchNorm2d>(4, cpu_),
                        std::make_shared<nn::ReLU>(), std::make_shared<nn::BatchNorm2d>(4, cpu_)});
  std::vector<std::string> before;
  for (const auto& [name, t] : model.named_buffers()) before.push_back(name);
  EXPECT_EQ(convert_sync_batchnorm(model, *group_), 2);
  std::vector<std::string> after;
  for (const auto& [name, t] : model.named_buffers()) after.push_back(name);
  EXPECT_EQ(before, after);
  EXPECT_NE(dynamic_cast<nn::BatchNorm2d&>(*model.named_children()[1].second).synchronizer(), nullptr);
}

// Outputs of two training forwards and the running statistics after them.
TEST_F(SyncBatchNormTest, ForwardAndRunningStatsMatchOneProcessOverTheWholeBatch) {
  auto reference = batch_norm(), synced = batch_norm(), local_only = batch_norm();
  ASSERT_EQ(convert_sync_batchnorm(*synced, *group_), 1);
  Generator data(5);
  for (int step = 0; step < 2; ++step) {
    const Tensor x = batch(data);
    const Tensor expected = my_slice(reference->forward(x));
    const Tensor y = synced->forward(my_slice(x));
    EXPECT_LE(relative_difference(y, expected), 1e-6) << "step " << step;
    if (size() > 1) {
      // Per-rank statistics are far off on this data: the comparison above can fail.
      EXPECT_GT(relative_difference(local_only->forward(my_slice(x)), expected), 1e-3) << "step " << step;
    }
  }
  EXPECT_LE(relative_difference(synced->running_mean, reference->running_mean), 1e-6);
  EXPECT_LE(relative_difference(synced->running_var, reference->running_var), 1e-6);
  EXPECT_EQ(synced->num_batches_tracked.item<int64_t>(), 2);
  if (size() > 1) {
    EXPECT_GT(relative_difference(local_only->running_mean, reference->running_mean), 1e-3);
    EXPECT_GT(relative_difference(local_only->running_var, reference->running_var), 1e-3);
  }
}

// Gradient convention (data-parallel, as PyTorch DDP + SyncBatchNorm): the reference loss is the
// mean over the GLOBAL batch, L = mean(y ⊙ r); rank q's loss is the mean over its slice, L_q =
// mean(y_q ⊙ r_q), so with equal slices L = (1/W)·Σ_q L_q. The weight/bias gradients each rank
// computes are ∂L_q/∂θ; the reducer averages them, giving ∂L/∂θ. The input gradient on rank q is
// ∂(Σ_r L_r)/∂x_q (the statistics couple every rank's input to every rank's loss) = W·∂L/∂x_q.
TEST_F(SyncBatchNormTest, GradientsMatchOneProcessUnderTheDataParallelConvention) {
  auto reference = batch_norm(), synced = batch_norm(), local_only = batch_norm();
  convert_sync_batchnorm(*synced, *group_);
  Generator data(6);
  const Tensor x = batch(data);
  const Tensor r = randn({kGlobal, kChannels, kH, kW}, data, kFloat32, cpu_);

  const Tensor x_ref = x.detach().set_requires_grad(true);
  mean(mul(reference->forward(x_ref), r)).backward();

  const Tensor x_mine = my_slice(x).contiguous().set_requires_grad(true);
  mean(mul(synced->forward(x_mine), my_slice(r))).backward();
  Tensor dweight = synced->weight.grad().contiguous(), dbias = synced->bias.grad().contiguous();
  group_->all_reduce(dweight, CollectiveReduce::Average)->wait();  // what the reducer does
  group_->all_reduce(dbias, CollectiveReduce::Average)->wait();

  const Tensor expected_dx = mul(my_slice(x_ref.grad()), static_cast<double>(size()));
  EXPECT_LE(relative_difference(x_mine.grad(), expected_dx), 1e-6);
  EXPECT_LE(relative_difference(dweight, reference->weight.grad()), 1e-6);
  EXPECT_LE(relative_difference(dbias, reference->bias.grad()), 1e-6);
  if (size() > 1) {
    const Tensor x_local = my_slice(x).contiguous().set_requires_grad(true);
    mean(mul(local_only->forward(x_local), my_slice(r))).backward();
    EXPECT_GT(relative_difference(x_local.grad(), expected_dx), 1e-3);
  }
}

// Eval normalises with the running statistics, as BatchNorm2d, and issues no collective.
TEST_F(SyncBatchNormTest, EvalUsesRunningStatsWithoutCollectives) {
  auto reference = batch_norm(), synced = batch_norm();
  convert_sync_batchnorm(*synced, *group_);
  Generator data(7);
  const Tensor x = batch(data);
  reference->forward(x);
  synced->forward(my_slice(x));
  reference->eval();
  synced->eval();
  const uint64_t issued = group_->log().next_sequence();
  const Tensor y = synced->forward(my_slice(x));
  EXPECT_EQ(group_->log().next_sequence(), issued);
  EXPECT_LE(relative_difference(y, my_slice(reference->forward(x))), 1e-6);
}

// bfloat16 activations with float32 parameters and statistics (mixed precision): the output is
// as close to the one-process kernel as bfloat16 rounding allows, the running stats stay float32.
TEST_F(SyncBatchNormTest, Bfloat16InputsKeepFloat32Statistics) {
  auto reference = batch_norm(), synced = batch_norm();
  convert_sync_batchnorm(*synced, *group_);
  Generator data(8);
  const Tensor x = batch(data, kBFloat16);
  const Tensor y = synced->forward(my_slice(x));
  EXPECT_EQ(y.dtype(), kBFloat16);
  EXPECT_EQ(synced->running_mean.dtype(), kFloat32);
  EXPECT_LE(relative_difference(y, my_slice(reference->forward(x))), 1e-2);
  EXPECT_LE(relative_difference(synced->running_mean, reference->running_mean), 1e-6);
  EXPECT_LE(relative_difference(synced->running_var, reference->running_var), 1e-6);
}

// Argument errors are found on the rank itself, before any collective, and name the layer.
TEST_F(SyncBatchNormTest, ErrorsNameTheLayerAndTheProblem) {
  auto bn = batch_norm();
  const Tensor x3 = zeros({2, kChannels, 4}, kFloat32, cpu_);
  EXPECT_ERROR_CONTAINS(sync_batch_norm(x3, bn->weight, bn->bias, bn->running_mean, bn->running_var, 0.1, 1e-5,
                                        *group_, "layer1.0.bn1"),
                        "sync_batch_norm 'layer1.0.bn1' (rank " + std::to_string(rank()) +
                            " of " + std::to_string(size()) + "): expected an input [N, C, H, W], got ");
  const Tensor x6 = zeros({2, 6, 3, 3}, kFloat32, cpu_);
  EXPECT_ERROR_CONTAINS(sync_batch_norm(x6, bn->weight, bn->bias, bn->running_mean, bn->running_var, 0.1, 1e-5,
                                        *group_, "bn"),
                        "weight must have shape [6] for input");
  const Tensor empty_shard = zeros({0, kChannels, 3, 3}, kFloat32, cpu_);
  if (size() > 1)
    EXPECT_ERROR_CONTAINS(sync_batch_norm(empty_shard, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                                          0.1, 1e-5, *group_, "bn"),
                          "is empty; every rank needs at least one sample");
  // Through the module, which checks its channel count first.
  convert_sync_batchnorm(*bn, *group_);
  EXPECT_ERROR_CONTAINS(bn->forward(x6), "BatchNorm2d(5): expected input [N, 5, H, W]");
  // Nothing was issued: the ranks stay in step.
  EXPECT_EQ(group_->log().next_sequence(), 0u);
}

// A conv + SyncBN + ReLU + linear model trained 3 SGD steps with the DDP reducer (on its own
// group) follows one process with plain BatchNorm2d over the whole batch.
TEST_F(SyncBatchNormTest, DdpTrainingMatchesOneProcessWithTheWholeBatch) {
  auto build = [&] {
    Generator gen(21);
    auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(3, 4, 3, cpu_, gen), std::make_shared<nn::BatchNorm2d>(4, cpu_),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4 * 4 * 4, 3, cpu_, gen)});
    model->train();
    return model;
  };
  auto ddp = build(), reference = build();
  ASSERT_EQ(convert_sync_batchnorm(*ddp, *group_), 1);
  MpiProcessGroup gradient_group(testing::test_mpi());
  broadcast_model_from_rank0(*ddp, gradient_group);
  Reducer reducer(ddp->named_parameters(), gradient_group);
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  SGD ddp_sgd(ddp->parameters(), o), reference_sgd(reference->parameters(), o);
  Generator data(22);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({kGlobal, 3, 6, 6}, data, kFloat32, cpu_, 2.0, 1.0);
    std::vector<int64_t> labels(kGlobal);
    for (int64_t i = 0; i < kGlobal; ++i) labels[i] = (i * 7 + step) % 3;
    const Tensor target = from_vector<int64_t>(labels, {kGlobal}, cpu_);

    reducer.prepare_for_backward(true);
    cross_entropy(ddp->forward(my_slice(x)), my_slice(target)).backward();
    reducer.finish();
    ddp_sgd.step();
    ddp_sgd.zero_grad(true);

    cross_entropy(reference->forward(x), target).backward();
    reference_sgd.step();
    reference_sgd.zero_grad(true);
  }
  const auto pd = ddp->named_parameters(), pr = reference->named_parameters();
  ASSERT_EQ(pd.size(), pr.size());
  for (size_t i = 0; i < pd.size(); ++i)
    EXPECT_LE(relative_difference(pd[i].second, pr[i].second), 1e-5) << pd[i].first;
  const auto bd = ddp->named_buffers(), br = reference->named_buffers();
  for (size_t i = 0; i < bd.size(); ++i)
    EXPECT_LE(relative_difference(bd[i].second, br[i].second), 1e-5) << bd[i].first;
}

}  // namespace
}  // namespace dp
