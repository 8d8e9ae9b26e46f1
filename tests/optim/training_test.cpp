// End to end: an MLP trained with SGD + a warmup/cosine schedule on separable synthetic data
// must cut its loss at least tenfold.
#include <gtest/gtest.h>

#include "models/mlp.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace dp {
namespace {

// 4 Gaussian blobs (std 0.5) in 16 dims, centred at ±2 on two axes: separable with margin.
struct Blobs {
  Tensor x, y;
};

Blobs make_blobs(int64_t n, Generator& gen, Device device) {
  std::vector<float> centred = randn({n, 16}, gen, kFloat32, device, 0.0, 0.5).to_vector<float>();
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = i % 4;
    centred[i * 16 + labels[i] / 2] += labels[i] % 2 ? 2.0f : -2.0f;
  }
  return {from_vector(centred, {n, 16}, device), from_vector(labels, {n}, device)};
}

TEST(TrainingTest, MlpLossFallsTenfold) {
  CpuBackend backend(2);
  Device cpu(&backend);
  Generator gen(2024);
  const Blobs data = make_blobs(256, gen, cpu);
  MLP model(16, {32}, 4, 0.0, cpu, gen);
  SGD optimizer(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t steps = 60;
  auto schedule = make_lr_schedule("cosine", {.base_lr = 0.1, .total_steps = steps, .warmup_steps = 5, .milestones = {}});

  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < steps; ++step) {
    Tensor loss = cross_entropy(model.forward(data.x), data.y);
    (step == 0 ? first_loss : last_loss) = loss.item<double>();
    loss.backward();
    optimizer.set_lr(schedule->lr_at(step));
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_LT(last_loss, first_loss / 10) << "first " << first_loss << ", last " << last_loss;
}

}  // namespace
}  // namespace dp
