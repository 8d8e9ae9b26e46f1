// End-to-end: the dptrain program given bad input prints one clear message and exits non-zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = dp::testing::ProgramResult;

Result run_dptrain(const std::string& args) {
  return dp::testing::run_program(dp::testing::dptrain_binary() + " " + args);
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dptrain_bad_input_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  // A config that would be valid but for `extra`, writing into the temp dir.
  std::string config(const std::string& extra) {
    return write("c.yaml", "run: {output_dir: " + (dir_ / "out").string() + ", max_steps: 1}\n" + extra);
  }
  void expect_error(const Result& r, const std::string& message) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message));
    // One clear message: a single "error:" line, no stack of diagnostics.
    EXPECT_EQ(r.output.find("error:"), r.output.rfind("error:")) << r.output;
  }

  fs::path dir_;
};

TEST_F(BadInput, MissingConfigFile) {
  expect_error(run_dptrain("--config " + (dir_ / "nope.yaml").string()), "cannot open config file");
}

TEST_F(BadInput, MalformedYaml) {
  expect_error(run_dptrain("--config " + write("bad.yaml", "run:\n  epochs: [1, 2\n")), "malformed YAML");
}

TEST_F(BadInput, UnknownKey) {
  expect_error(run_dptrain("--config " + config("optimizer: {lrr: 0.1}\n")), "unknown key 'optimizer.lrr'");
}

TEST_F(BadInput, WrongType) {
  expect_error(run_dptrain("--config " + config("data: {batch_size: big}\n")),
               "data.batch_size: expected an integer in [1, 16777216], got 'big'");
}

TEST_F(BadInput, NegativeLearningRate) {
  expect_error(run_dptrain("--config " + config("optimizer: {lr: -0.1}\n")),
               "optimizer.lr: expected a positive number, got -0.1");
  expect_error(run_dptrain("--config " + config("") + " --set optimizer.lr=-1"),
               "--set optimizer.lr=-1: optimizer.lr: expected a positive number");
}

TEST_F(BadInput, UnknownModelName) {
  expect_error(run_dptrain("--config " + config("model: {name: vgg16}\n")),
               "model.name: unknown value 'vgg16' (expected one of: small_cnn, mlp, resnet18, resnet34, resnet50, "
               "resnet101, resnet152, bert)");
}

TEST_F(BadInput, MissingDatasetFile) {
  expect_error(run_dptrain("--config " + config("data: {root: " + (dir_ / "no_data").string() + "}\n")),
               "install Debian's dataset-fashion-mnist or set data.root");
}

TEST_F(BadInput, CorruptDatasetFile) {
  const fs::path root = dir_ / "corrupt";
  fs::create_directories(root);
  // A gzip header followed by garbage: not a valid deflate stream.
  std::ofstream(root / "train-images-idx3-ubyte.gz", std::ios::binary)
      << std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03garbage-not-deflate", 29);
  std::ofstream(root / "train-labels-idx1-ubyte.gz", std::ios::binary) << "x";
  Result r = run_dptrain("--config " + config("data: {root: " + root.string() + "}\n"));
  expect_error(r, "train-images-idx3-ubyte.gz");
}

TEST_F(BadInput, TruncatedDatasetFile) {
  const fs::path root = dir_ / "truncated";
  fs::create_directories(root);
  // An uncompressed IDX header promising 60000 images, with only a few bytes of payload.
  std::string header("\x00\x00\x08\x03\x00\x00\xea\x60\x00\x00\x00\x1c\x00\x00\x00\x1c", 16);
  std::ofstream(root / "train-images-idx3-ubyte", std::ios::binary) << header << "abc";
  Result r = run_dptrain("--config " + config("data: {root: " + root.string() + "}\n"));
  expect_error(r, "truncated");
}

TEST_F(BadInput, UnknownFlagAndMissingConfig) {
  Result r = run_dptrain("--bogus");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128);
  r = run_dptrain("");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--config"));
}

// model.init_from: a file that is not there, or weights of another model, stop the run naming the
// file and what does not fit.
TEST_F(BadInput, InitFromMissingOrMisfittingWeights) {
  expect_error(run_dptrain("--config " + config("model: {init_from: " + (dir_ / "none.safetensors").string() + "}\n")),
               "model.init_from: ");
  expect_error(run_dptrain("--config " + config("model: {init_from: " + (dir_ / "none.safetensors").string() + "}\n")),
               "none.safetensors");
  // A safetensors file holding one tensor of another name: every SmallCNN tensor is missing.
  const std::string header = R"({"other":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header + std::string(4, '\0');
  const std::string weights = write("w.safetensors", file);
  const Result r = run_dptrain("--config " + config("model: {init_from: " + weights + "}\n"));
  expect_error(r, "model.init_from: " + weights + " does not fit model small_cnn with 10 classes");
  EXPECT_THAT(r.output, HasSubstr("1 unexpected: other"));
  EXPECT_THAT(r.output, HasSubstr("missing: "));
}

// NOTE [ A schedule that does not fit its run ]: refused before the model is built, or said once
// at the start while the run goes on.
TEST_F(BadInput, AScheduleLongerThanTheRunIsRefusedOrSaid) {
  expect_error(run_dptrain("--config " + config("schedule: {name: cosine, warmup_epochs: 1000}\n")),
               "schedule.warmup_epochs (1000 = ");
  const Result r = run_dptrain("--config " + config("schedule: {name: constant, warmup_epochs: 1000}\n"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\nwarning: schedule.warmup_epochs (1000 = ")) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the learning rate stays below optimizer.lr (0.05)"));
}

// NOTE [ CPU memory limit ]: a batch the CPU cannot hold is an error naming the limit, not the
// out-of-memory killer's silent exit 137 (here with a small explicit limit; the automatic one is
// the node's available memory).
TEST_F(BadInput, ABatchPastTheCpuMemoryLimitIsAClearError) {
  expect_error(run_dptrain("--config " + config("data: {batch_size: 4096}\n") + " --set run.cpu_memory_limit_gib=0.2"),
               "over its limit of 0.20 GiB (run.cpu_memory_limit_gib); past it Linux would kill the run without a "
               "message. Lower the batch size or the model's size");
  expect_error(run_dptrain("--config " + config("") + " --set run.cpu_memory_limit_gib=-1"),
               "run.cpu_memory_limit_gib: expected a number of GiB in [0, 1048576] (0: automatic), got -1");
}

// small_cnn and mlp size their classifier for the training images; evaluation images it cannot
// take failed at the first evaluation, after a whole epoch of training. The resnets take any size.
TEST_F(BadInput, EvaluationImagesAModelCannotTakeAreRefusedBeforeTraining) {
  const std::string synthetic = "data: {dataset: synthetic, synthetic_train_size: 64, synthetic_eval_size: 16, "
                                "batch_size: 16, eval_batch_size: 16, image_size: 32, eval_resize_size: 40, ";
  auto run_with = [&](const std::string& eval_size, const std::string& model) {
    return run_dptrain("--config " + config(synthetic + "eval_image_size: " + eval_size + "}\nmodel: {name: " + model +
                                            "}\n"));
  };
  for (const char* model : {"small_cnn", "mlp"}) {
    const Result r = run_with("36", model);
    expect_error(r, std::string("model.name ") + model + " sizes its layers for the training images ([3, 32, 32], " +
                        "data.image_size 32) and takes evaluation images of side " +
                        (model == std::string("mlp") ? "32" : "32 to 35") +
                        " only, but they are [3, 36, 36] (data.eval_image_size 36): set data.eval_image_size to 32");
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("step 1/"))) << "refused before training";
  }
  // small_cnn's features after two 2x2 poolings: 33 pools to 32's 8x8, and its classifier fits.
  const Result pooled_alike = run_with("33", "small_cnn");
  EXPECT_EQ(pooled_alike.exit_code, 0) << pooled_alike.output;
  expect_error(run_dptrain("--config " + config("data: {dataset: synthetic, synthetic_train_size: 64, "
                                                "synthetic_eval_size: 16, batch_size: 16, image_size: 30, "
                                                "eval_image_size: 30}\n")),
               "model.name small_cnn takes training images whose side is a multiple of 4 (its two 2x2 poolings), but "
               "they are [3, 30, 30] (data.image_size 30)");
  const Result resnet = run_with("36", "resnet18");
  EXPECT_EQ(resnet.exit_code, 0) << resnet.output;
  const Result same = run_with("32", "small_cnn");
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

TEST_F(BadInput, CudaDeviceWithoutGpuIsAClearError) {
  Result r = run_dptrain("--config " + config("") + " --set run.device=cuda");
  // Either no GPU (this machine, CI) or a build without CUDA: both must be a clean error; on a
  // GPU machine training starts, which this test does not cover.
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_LT(r.exit_code, 128) << r.output;
  EXPECT_THAT(r.output, ::testing::AnyOf(HasSubstr("no CUDA GPU is visible"), HasSubstr("built without CUDA")));
}

}  // namespace
