// build_run and train_step driven directly (the dptrain program's tests drive them end to end).
#include "launch/training_run.h"

#include <gtest/gtest.h>

#include "runtime/core/runtime.h"

namespace dp {
namespace {

Config dropout_mlp_on_synthetic_images() {
  Config c = config_from_yaml_string(
      "run: {threads: 1}\n"
      "data: {dataset: synthetic, synthetic_train_size: 32, synthetic_eval_size: 8, batch_size: 16, "
      "eval_batch_size: 8, image_size: 8, eval_resize_size: 8, eval_image_size: 8}\n"
      "model: {name: mlp, mlp_hidden: [12], dropout: 0.5}\n",
      "test.yaml");
  return c;
}

// Dropout draws its masks from the run's generator, which lives as long as the run (a generator
// local to build_run would leave the model a dangling reference: masks from freed memory).
TEST(TrainingRun, DropoutDrawsFromTheRunsOwnGenerator) {
  Runtime runtime;
  const std::unique_ptr<TrainingRun> run = build_run(dropout_mlp_on_synthetic_images(), runtime, RunWorld{});
  const uint64_t after_init = run->generator.offset();
  EXPECT_GT(after_init, 0u) << "the initialisation draws from it";
  run->train_loader->begin_epoch(0);
  std::optional<LoadedBatch> batch = run->train_loader->next();
  ASSERT_TRUE(batch.has_value());
  StepProfiler profiler;
  train_step(*run, run->train_uploader->upload(*batch), profiler);
  EXPECT_EQ(run->generator.offset() - after_init, 16u * 12u) << "one mask of batch x hidden";
}

}  // namespace
}  // namespace dp
