// End-to-end: dynamic loss scaling in the trainer (loss_scale.*; optim/grad_scaler.h). In float32
// with power-of-two scales, scaling the loss and unscaling the gradients is exact, so a run with
// loss scaling must end with the same model, bit for bit, as the run without — on one process
// and on two ranks (where the gradients are unscaled after the all-reduce). The scale's growth,
// the metrics records and the end line are checked on the way.
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
using ::testing::HasSubstr;

const std::string kMpirun = "timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none";


class LossScale : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_loss_scale"); }
  void TearDown() override { fs::remove_all(dir_); }

  // 30 SmallCNN steps, one thread per rank, growth every 10 good steps.
  std::string config(const std::string& name, bool scaled) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "run: {output_dir: " << (dir_ / name).string() << "_out"
                     << ", max_steps: 30, threads: 1, log_every: 10, deterministic: true}\n"
                     << "data: {batch_size: 64, eval_batch_size: 2000}\n"
                     << "loss_scale: {enabled: " << (scaled ? "true" : "false") << ", growth_interval: 10}\n";
    return p.string();
  }
  std::string metrics(const std::string& name) const {
    std::ifstream in(dir_ / (name + "_out") / "metrics.jsonl");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
};

TEST_F(LossScale, Float32RunEndsBitIdenticalToTheRunWithout) {
  const ProgramResult plain = run_program(dptrain_binary() + " --config " + config("plain.yaml", false));
  const ProgramResult scaled = run_program(dptrain_binary() + " --config " + config("scaled.yaml", true));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  ASSERT_EQ(model_digest(plain.output).size(), 16u) << plain.output;
  EXPECT_EQ(model_digest(scaled.output), model_digest(plain.output));
  // 2^16 grown three times (after steps 10, 20 and 30).
  EXPECT_THAT(scaled.output, HasSubstr("loss scale 524288 at the end; 0 of 30 optimiser steps skipped"));
  EXPECT_THAT(plain.output, ::testing::Not(HasSubstr("loss scale")));
  const std::string log = metrics("scaled.yaml");
  EXPECT_THAT(log, HasSubstr("\"loss_scale\":{\"scale\":131072.0,\"skipped_steps\":0}"));  // step 10
  EXPECT_THAT(log, HasSubstr("\"loss_scale\":{\"scale\":524288.0,\"skipped_steps\":0}"));  // step 30, end
  EXPECT_THAT(metrics("plain.yaml"), ::testing::Not(HasSubstr("loss_scale")));
}

TEST_F(LossScale, TwoRanksUnscaleAfterTheAllReduceAndEndBitIdenticalToTheRunWithout) {
  const ProgramResult plain = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("plain.yaml", false));
  const ProgramResult scaled = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("scaled.yaml", true));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(scaled.exit_code, 0) << scaled.output;
  ASSERT_EQ(model_digest(plain.output).size(), 16u) << plain.output;
  EXPECT_EQ(model_digest(scaled.output), model_digest(plain.output));
  EXPECT_THAT(scaled.output, HasSubstr("loss scale 524288 at the end; 0 of 30 optimiser steps skipped"));
}

// A scale too large for the first steps: they overflow, are skipped and back the scale off
// until the gradients are finite; the run then trains and says how many steps it skipped.
TEST_F(LossScale, AnOverflowingInitialScaleBacksOffAndTrains) {
  const std::string cfg = config("big.yaml", true);
  const ProgramResult r = run_program(dptrain_binary() + " --config " + cfg + " --set loss_scale.init_scale=3e38" +
                                      " --set data.batch_size=8 --set run.max_skipped_steps=200");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("loss scale [0-9.e+]+ at the end; [1-9][0-9]* of 30 optimiser steps "
                                                 "skipped for a gradient overflow"));
}

}  // namespace
