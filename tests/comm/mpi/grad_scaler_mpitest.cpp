// Dynamic loss scaling across real ranks (mpirun with 1, 2 and 4 ranks; optim/grad_scaler.h).
//
// The verdict is taken after the all-reduce, so an inf in one rank's gradient reaches every
// rank's averaged gradients and every rank skips the same step, with no collective of its own;
// weights and optimiser state stay bit-identical to before the step, and the ranks stay in
// agreement afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "comm/ddp/reducer.h"
#include "comm/mpi/mpi_process_group.h"
#include "models/registry.h"
#include "mpi_test_environment.h"
#include "optim/adamw.h"
#include "optim/grad_scaler.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace dp {
namespace {

std::vector<std::vector<float>> snapshot(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : tensors) out.push_back(t.contiguous().to_vector<float>());
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

class GradScalerDdpTest : public ::testing::Test {
 protected:
  GradScalerDdpTest() : group_(std::make_unique<MpiProcessGroup>(testing::test_mpi())) {}
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  // The float32 tensors of the optimiser's state (moments), copied.
  static std::vector<Tensor> float_state(const Optimizer& optimizer) {
    std::vector<Tensor> out;
    for (const auto& [name, t] : optimizer.state_dict())
      if (t.dtype() == kFloat32) out.push_back(t.clone());
    return out;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;
};

TEST_F(GradScalerDdpTest, AnInfOnOneRankSkipsTheStepOnEveryRankLeavingStateBitIdentical) {
  ModelSpec spec;
  spec.name = "mlp";
  spec.mlp_hidden = {32};
  Generator init(5);
  auto model = build_model(spec, cpu_, init);
  model->train();
  broadcast_model_from_rank0(*model, *group_);
  const auto named = model->named_parameters();
  const std::vector<Tensor> params = model->parameters();

  // Step 3: the last rank's gradient of one weight gets an inf, after backward computed it and
  // before the reducer all-reduces it (this hook is registered before the reducer's).
  constexpr int kBadStep = 3;
  int step = 0;
  Tensor target = named[2].second;
  target.register_grad_ready_hook([&](Tensor& leaf) {
    if (step != kBadStep || rank() != size() - 1) return;
    NoGradGuard no_grad;
    leaf.grad().view({-1}).narrow(0, 3, 1).fill_(std::numeric_limits<double>::infinity());
  });
  Reducer reducer(named, *group_);
  AdamWOptions adamw_options;
  adamw_options.lr = 1e-3;
  AdamW adamw(params, adamw_options);
  GradScalerOptions scaler_options;
  scaler_options.growth_interval = 2;
  GradScaler scaler(cpu_, scaler_options);

  const int64_t per_rank = 4;
  Generator data(17);  // the same stream on every rank; each takes its shard
  const double expected_scale[] = {65536, 131072, 131072, 65536, 65536, 131072};
  for (step = 0; step < 6; ++step) {
    Tensor x = randn({per_rank * size(), 1, 28, 28}, data, kFloat32, cpu_);
    Tensor y = from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(per_rank * size()), step % 10),
                                    {per_rank * size()}, cpu_);
    const auto params_before = snapshot(params);
    const auto state_before = snapshot(float_state(adamw));
    reducer.prepare_for_backward(true);
    scaler.scale(cross_entropy(model->forward(x.narrow(0, rank() * per_rank, per_rank)),
                               y.narrow(0, rank() * per_rank, per_rank)))
        .backward();
    reducer.finish();
    scaler.unscale(params);
    scaler.step(adamw);
    const bool stepped = !scaler.step_skipped();
    scaler.update();
    adamw.zero_grad(true);
    EXPECT_EQ(stepped, step != kBadStep) << "rank " << rank() << " step " << step;
    EXPECT_EQ(scaler.get_scale(), expected_scale[step]) << "rank " << rank() << " step " << step;
    if (step == kBadStep) {
      EXPECT_TRUE(same_bits(snapshot(params), params_before)) << "rank " << rank() << ": weights changed";
      EXPECT_TRUE(same_bits(snapshot(float_state(adamw)), state_before)) << "rank " << rank() << ": moments changed";
      EXPECT_EQ(adamw.step_count(0, 0), kBadStep) << "rank " << rank();
    }
  }
  EXPECT_EQ(adamw.step_count(0, 0), 5);
  // Every rank holds rank 0's weights, bit for bit.
  const auto mine = snapshot(params);
  std::vector<Tensor> rank0;
  for (const Tensor& p : params) rank0.push_back(p.detach().clone());
  for (Tensor& t : rank0) group_->broadcast(t, 0)->wait();
  EXPECT_TRUE(same_bits(mine, snapshot(rank0))) << "rank " << rank() << " differs from rank 0";
}

}  // namespace
}  // namespace dp
