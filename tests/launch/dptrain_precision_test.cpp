// End-to-end: run.precision (NOTE [ Autocast policy ]). bf16 and fp16 runs train the SmallCNN as
// well as float32 over the same steps, say what they do (autocast, master weights, loss
// scaling: on by default for fp16 only), record it in the metrics, and repeat bit for bit.
// The 3-epoch accuracy comparison is in bench/RESULTS.md (too long for a test).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::model_digest;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using dp::testing::test_accuracy;
using ::testing::HasSubstr;
using ::testing::Not;

class Precision : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_precision"); }
  void TearDown() override { fs::remove_all(dir_); }

  // 120 SmallCNN steps of batch 64 at one thread, then the whole test set.
  ProgramResult run(const std::string& name, const std::string& precision, const std::string& extra = "") {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "run: {output_dir: " << (dir_ / name).string() << ", max_steps: 120, threads: 1"
                     << ", log_every: 40, precision: " << precision << "}\n"
                     << "data: {batch_size: 64, eval_batch_size: 2000}\n"
                     << extra;
    return run_program(dptrain_binary() + " --config " + p.string());
  }
  std::string metrics(const std::string& name) const {
    std::ifstream in(dir_ / name / "metrics.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
};

TEST_F(Precision, Bf16AndFp16TrainAsWellAsFloat32AndSaySo) {
  const ProgramResult fp32 = run("fp32", "fp32");
  const ProgramResult bf16 = run("bf16", "bf16");
  const ProgramResult fp16 = run("fp16", "fp16");
  for (const ProgramResult* r : {&fp32, &bf16, &fp16}) ASSERT_EQ(r->exit_code, 0) << r->output;
  const double a32 = test_accuracy(fp32.output), a_bf16 = test_accuracy(bf16.output), a_fp16 = test_accuracy(fp16.output);
  ASSERT_GT(a32, 70.0) << fp32.output;
  // 120 steps leave the accuracy moving by a point or two between nearby runs; the mixed runs
  // must land in that band, not merely train.
  EXPECT_NEAR(a_bf16, a32, 3.0) << bf16.output;
  EXPECT_NEAR(a_fp16, a32, 3.0) << fp16.output;
  // Different arithmetic, different models.
  EXPECT_NE(model_digest(bf16.output), model_digest(fp32.output));
  EXPECT_NE(model_digest(fp16.output), model_digest(bf16.output));

  EXPECT_THAT(fp32.output, Not(HasSubstr("mixed precision")));
  EXPECT_THAT(bf16.output, HasSubstr("mixed precision: bf16 autocast, float32 master weights, loss scaling off"));
  EXPECT_THAT(fp16.output, HasSubstr("mixed precision: fp16 autocast, float32 master weights, loss scaling on"));
  EXPECT_THAT(fp16.output, HasSubstr("optimiser steps skipped"));  // the scaler's end line
  EXPECT_THAT(metrics("bf16"), HasSubstr("\"precision\":\"bf16\""));
  EXPECT_THAT(metrics("bf16"), Not(HasSubstr("loss_scale")));
  EXPECT_THAT(metrics("fp16"), HasSubstr("\"loss_scale\":{\"scale\":"));
}

TEST_F(Precision, MixedPrecisionRunsRepeatBitForBitAndLossScalingCanBeTurnedOff) {
  const ProgramResult first = run("first", "bf16");
  const ProgramResult second = run("second", "bf16");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  ASSERT_EQ(model_digest(first.output).size(), 16u) << first.output;
  EXPECT_EQ(model_digest(first.output), model_digest(second.output));

  const ProgramResult unscaled = run("unscaled", "fp16", "loss_scale: {enabled: false}\n");
  ASSERT_EQ(unscaled.exit_code, 0) << unscaled.output;
  EXPECT_THAT(unscaled.output, HasSubstr("mixed precision: fp16 autocast, float32 master weights, loss scaling off"));
}

}  // namespace
