// End-to-end: run.channels_last (NOTE [ Channels-last ]). true trains a conv net on channels-last
// activations and says so, reaching the NCHW run's accuracy over the same steps, bit-repeatably;
// auto is NCHW on the CPU (channels-last on a GPU, which these tests do not have). A bad value is
// one clear error.
// (Weights never change format: parameters stay [Cout, Cin/g, KH, KW] whatever the activations.)
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

class ChannelsLastRun : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_channels_last"); }
  void TearDown() override { fs::remove_all(dir_); }

  // 100 SmallCNN steps of batch 64 at one thread, then the whole test set.
  ProgramResult run(const std::string& name, const std::string& channels_last, const std::string& extra = "") {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "run: {output_dir: " << (dir_ / name).string() << ", max_steps: 100, threads: 1"
                     << ", log_every: 50" << (channels_last.empty() ? "" : ", channels_last: " + channels_last)
                     << "}\n"
                     << "data: {batch_size: 64, eval_batch_size: 2000}\n"
                     << extra;
    return run_program(dptrain_binary() + " --config " + p.string());
  }

  fs::path dir_;
};

TEST_F(ChannelsLastRun, TrueTrainsAsNchwDoesAndAutoIsNchwOnTheCpu) {
  const ProgramResult cl = run("cl", "true");
  const ProgramResult cl_again = run("cl_again", "true");
  const ProgramResult nchw = run("nchw", "false");
  const ProgramResult automatic = run("auto", "");
  for (const ProgramResult* r : {&cl, &cl_again, &nchw, &automatic}) ASSERT_EQ(r->exit_code, 0) << r->output;
  EXPECT_THAT(cl.output, HasSubstr("steps per epoch, channels-last activations"));
  EXPECT_THAT(nchw.output, Not(HasSubstr("channels-last")));
  EXPECT_THAT(automatic.output, Not(HasSubstr("channels-last")));
  const double a_cl = test_accuracy(cl.output), a_nchw = test_accuracy(nchw.output);
  ASSERT_GT(a_nchw, 65.0) << nchw.output;
  // Other convolution algorithms, other rounding: the accuracy lands in the band of nearby runs.
  EXPECT_NEAR(a_cl, a_nchw, 3.0) << cl.output;
  ASSERT_EQ(model_digest(cl.output).size(), 16u) << cl.output;
  EXPECT_EQ(model_digest(cl_again.output), model_digest(cl.output));  // repeatable
  EXPECT_NE(model_digest(cl.output), model_digest(nchw.output));
  EXPECT_EQ(model_digest(automatic.output), model_digest(nchw.output));  // auto on the CPU: NCHW
}

TEST_F(ChannelsLastRun, ABadValueIsOneClearError) {
  const ProgramResult r = run("bad", "yes");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("run.channels_last: unknown value 'yes' (expected one of: auto, true, false)"));
}

}  // namespace
