// End-to-end, issue 10's classes: inputs that used to give a wrong run exiting 0, lose a
// previous run's file, or end without a word. Each case runs the dptrain program as a user would
// and checks the exit status, the one message and, where a run started, its metrics file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using dp::testing::signalled_run;
using ::testing::HasSubstr;

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t begin = text.rfind('\n', end);
  return text.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

// An IDX file of unsigned bytes: magic, big-endian dims, then `payload` bytes.
void write_idx(const fs::path& p, std::vector<uint32_t> dims, size_t payload) {
  std::string bytes = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((d >> shift) & 0xff));
  bytes.append(payload, '\0');
  std::ofstream(p, std::ios::binary) << bytes;
}

class Robustness : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_robustness"); }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path out() const { return dir_ / "out"; }
  // A small, fast run (an MLP, one thread) into the temp dir; `extra` is more YAML.
  std::string config(const std::string& extra, const std::string& name = "c.yaml") {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "run: {output_dir: " << out().string() << ", max_steps: 2, threads: 1}\n"
                     << "model: {name: mlp, mlp_hidden: [16]}\n"
                     << extra;
    return p.string();
  }
  ProgramResult run(const std::string& args) { return run_program(dptrain_binary() + " " + args); }
  void expect_error(const ProgramResult& r, const std::string& message) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 128) << "crashed: " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << r.output;
    EXPECT_EQ(r.output.find("error:"), r.output.rfind("error:")) << "one message: " << r.output;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("unexpected error"))) << r.output;
  }
  std::string metrics() const { return dp::testing::read_text_file(out() / "metrics.jsonl"); }

  fs::path dir_;
};

// ---- The table: inputs that must stop with one clear message before or during training ----
struct BadCase {
  const char* name;
  std::string yaml;      // added to the small config
  std::string args;      // more command-line arguments
  std::string message;   // what the error must say
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadRun : public Robustness, public ::testing::WithParamInterface<BadCase> {};

TEST_P(BadRun, StopsWithOneClearMessage) {
  const BadCase& c = GetParam();
  expect_error(run("--config " + config(c.yaml) + " " + c.args), c.message);
}

INSTANTIATE_TEST_SUITE_P(
    Issue10, BadRun,
    ::testing::Values(
        // Class 2: runs that would train on nothing.
        BadCase{"DropLastBatchLargerThanTheTrainingSet", "data: {batch_size: 60001, drop_last: true}\n", "",
                "data.batch_size 60001 is larger than the 60000 training samples and data.drop_last is true"},
        // Class 3: counts that used to wrap or explode.
        BadCase{"EpochsBeyondTheirRange", "", "--set run.epochs=3534877135",
                "--set run.epochs=3534877135: run.epochs: expected an integer in [1, 100000]"},
        BadCase{"BatchBeyondItsRange", "data: {batch_size: 4611686018427387904}\n", "",
                "data.batch_size: expected an integer in [1, 16777216]"},
        BadCase{"ThreadsBeyondTheirRange", "", "--set run.threads=100000", "run.threads: expected an integer in [1, 1024]"},
        BadCase{"PrefetchBeyondItsRange", "data: {prefetch: 100000000}\n", "", "data.prefetch: expected an integer in [1, 64]"},
        BadCase{"DeviceIndexBeyondInt", "", "--set run.device=cuda:4294967296", "expected cpu, cuda or cuda:N with N in [0, 1023]"},
        // Class 4: a watchdog timeout that would overflow or silently switch it off.
        BadCase{"WatchdogTimeoutTooLarge", "distributed: {timeout_s: 1e16}\n", "",
                "distributed.timeout_s: expected 0 (off) or a number of seconds in [1, 604800], got 1e+16"},
        BadCase{"WatchdogTimeoutTooSmall", "distributed: {timeout_s: 0.0001}\n", "",
                "distributed.timeout_s: expected 0 (off) or a number of seconds in [1, 604800], got 0.0001"},
        // Class 5: divergence.
        BadCase{"NonFiniteLoss", "optimizer: {lr: 1e30}\n", "--set run.max_steps=40",
                "the run has diverged. Lower optimizer.lr"},
        BadCase{"StepScheduleThatGrows",
                "optimizer: {lr: 0.05}\nschedule: {name: step, step_epochs: [0.01, 0.02, 0.03], gamma: 1e10}\n",
                "--set run.max_steps=60", "; schedule.gamma is 1e+10, which multiplies the learning rate at every milestone"},
        BadCase{"StepsSkippedInARow", "optimizer: {lr: 1e30, clip_grad_norm: 1}\n",
                "--set run.max_steps=200 --set run.max_skipped_steps=3 --set run.log_every=1000",
                "the optimiser step was skipped 3 times in a row (non-finite gradient norm): the run has diverged"},
        BadCase{"LossScaleOverflowsAtEveryScale", "optimizer: {lr: 1e30}\nloss_scale: {enabled: true}\n",
                "--set run.max_steps=200 --set run.max_skipped_steps=3 --set run.log_every=1000",
                "the optimiser step was skipped 3 times in a row (non-finite gradients at every loss scale down to"},
        BadCase{"LossScaleTooHighFromTheStart", "loss_scale: {init_scale: 3.0e38}\n",
                "--set run.precision=fp16 --set run.max_steps=200 --set run.max_skipped_steps=3 --set run.log_every=1000",
                "every optimiser step so far was skipped (non-finite gradients at every loss scale from 3e+38 down to "
                "7.5e+37), so no update was ever applied: the initial loss scale is too high"},
        BadCase{"CompressedGradientsWithShardsOnFewerRanks", "distributed: {grad_dtype: bf16, shards: 2}\n", "",
                "distributed.grad_dtype bf16 rounds each rank's gradient to bf16 before the all-reduce, but a rank "
                "training 2 shards adds theirs up in float32 first"},
        // Class 6: config shapes.
        BadCase{"DuplicatedKey", "optimizer: {lr: 0.1, lr: 0.2}\n", "", "optimizer.lr: given twice (first at line 3)"},
        BadCase{"ScalarSectionWithSet", "data: 5\n", "--set data.batch_size=8", "data: expected a mapping of keys"},
        BadCase{"ComplexKey", "? [a]\n: 1\n", "", "expected a key name, got a list as a key"},
        // Class 1: a metrics file outside the run's folder.
        BadCase{"AbsoluteMetricsFile", "", "--set run.metrics_file=/tmp/x.jsonl",
                "run.metrics_file: expected a file name relative to run.output_dir"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

// ---- Class 2 with data of our own: empty splits ----
TEST_F(Robustness, EmptyTrainingSetIsAnError) {
  const fs::path root = dir_ / "empty";
  fs::create_directories(root);
  write_idx(root / "train-images-idx3-ubyte", {0, 28, 28}, 0);
  write_idx(root / "train-labels-idx1-ubyte", {0}, 0);
  write_idx(root / "t10k-images-idx3-ubyte", {2, 28, 28}, 2 * 784);
  write_idx(root / "t10k-labels-idx1-ubyte", {2}, 2);
  const ProgramResult r = run("--config " + config("data: {root: " + root.string() + "}\n"));
  expect_error(r, "has no samples: there is nothing to train on");
  // The run had not started: no metrics file pretends it did.
  EXPECT_FALSE(fs::exists(out() / "metrics.jsonl") && metrics().find("\"event\":\"step\"") != std::string::npos);
}

TEST_F(Robustness, EmptyTestSetIsAnError) {
  const fs::path root = dir_ / "no_test";
  fs::create_directories(root);
  write_idx(root / "train-images-idx3-ubyte", {2, 28, 28}, 2 * 784);
  write_idx(root / "train-labels-idx1-ubyte", {2}, 2);
  write_idx(root / "t10k-images-idx3-ubyte", {0, 28, 28}, 0);
  write_idx(root / "t10k-labels-idx1-ubyte", {0}, 0);
  expect_error(run("--config " + config("data: {root: " + root.string() + ", batch_size: 2}\n")),
               "has no samples: the run could not be evaluated");
}

// Class 3: a batch far larger than the data is not materialised whole (it used to allocate
// (prefetch + 1) x 16 M samples and be killed by the OOM killer); evaluation still happens.
TEST_F(Robustness, HugeEvalBatchEvaluatesTheWholeTestSetInOneBatch) {
  const ProgramResult r = run("--config " + config("data: {eval_batch_size: 16777216}\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("test accuracy")) << r.output;
  EXPECT_THAT(metrics(), HasSubstr("\"test_accuracy\""));
}

// Class 2: loader buffers beyond the machine are refused before anything is allocated. The
// largest buffers Fashion-MNIST allows (batch 60000 and eval batch 10000, prefetch 64: 65
// batches each of 784 floats + a label per sample) are ~13.3 GiB, so this can only be checked on
// a machine with less than twice that (CI's has 24 GiB); on a bigger one such a run is legal.
TEST_F(Robustness, LoaderBuffersOverHalfTheMemoryAreRefusedBeforeAllocating) {
  const double sample_bytes = 784 * sizeof(float) + sizeof(int64_t);
  const double largest = (60000 + 10000) * sample_bytes * 65;
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (largest <= memory / 2)
    GTEST_SKIP() << "this machine has " << memory / (1 << 30) << " GiB: the largest loader buffers ("
                 << largest / (1 << 30) << " GiB) fit in half of it";
  const ProgramResult r = run("--config " + config("data: {batch_size: 60000, eval_batch_size: 10000, prefetch: 64}\n"));
  expect_error(r, "the data loaders' batch buffers would take 13.3 GiB");
  EXPECT_THAT(r.output, HasSubstr("lower data.prefetch or the batch sizes")) << r.output;
  EXPECT_FALSE(fs::exists(out() / "metrics.jsonl") && metrics().find("\"event\":\"step\"") != std::string::npos);
}

// Class 5: the metrics file ends with why the run ended, an error included.
TEST_F(Robustness, DivergenceNamesTheStepAndEndsTheMetricsFile) {
  const ProgramResult r = run("--config " + config("optimizer: {lr: 1e30}\n") + " --set run.max_steps=40");
  expect_error(r, "the run has diverged");
  EXPECT_THAT(r.output, ::testing::ContainsRegex("step [0-9]+ \\(epoch 1\\): the training loss is (nan|\\+inf|-inf)"));
  const std::string end = last_line(metrics());
  EXPECT_THAT(end, HasSubstr("\"event\":\"end\"")) << end;
  EXPECT_THAT(end, HasSubstr("\"reason\":\"error\"")) << end;
  EXPECT_THAT(end, HasSubstr("the run has diverged")) << end;
}

// ---- Class 1: nothing a user made is overwritten or moved silently ----
TEST_F(Robustness, EveryEarlierMetricsFileIsKeptEvenWithinOneSecond) {
  fs::create_directories(out());
  const fs::path m = out() / "metrics.jsonl";
  std::ofstream(m) << "first run\n";
  const auto stamp = fs::last_write_time(m);
  const std::string cfg = config("");
  for (int i = 0; i < 2; ++i) {
    // Both earlier files carry the same modification time, as two runs ending in one second do.
    fs::last_write_time(m, stamp);
    const ProgramResult r = run("--config " + cfg);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("an earlier run's " + m.string() + " is kept as " + m.string() + ".")) << r.output;
  }
  int first = 0, completed = 0, files = 0;
  for (const auto& e : fs::directory_iterator(out())) {
    if (!e.path().filename().string().starts_with("metrics.jsonl")) continue;  // the weights files too
    ++files;
    const std::string text = dp::testing::read_text_file(e.path());
    first += text == "first run\n";
    completed += text.find("\"reason\":\"completed\"") != std::string::npos ||
                 text.find("\"reason\":\"max_steps\"") != std::string::npos;
  }
  EXPECT_EQ(files, 3);
  EXPECT_EQ(first, 1) << "the first run's file was lost";
  EXPECT_EQ(completed, 2);
}

// run.weights_file: the final weights with torch's names and, in the metadata, the digest the
// run prints; another run starts from them (model.init_from, strict) in the same folder, which
// keeps the earlier file under another name instead of replacing it; empty turns it off.
TEST_F(Robustness, FinalWeightsAreWrittenLoadableAndNeverOverwritten) {
  const ProgramResult first = run("--config " + config(""));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const fs::path weights = out() / "model.safetensors";
  EXPECT_THAT(first.output, HasSubstr("weights in " + weights.string()));
  ASSERT_TRUE(fs::exists(weights));
  // The metadata names the model and carries the printed digest.
  std::ifstream in(weights, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(bytes, HasSubstr("\"model_digest\":\"" + dp::testing::model_digest(first.output) + "\""));
  EXPECT_THAT(bytes, HasSubstr("\"layers.0.weight\"")) << "torch's names (the MLP's first Linear)";
  // A second run in the same folder starts from them and keeps them under another name.
  const ProgramResult second = run("--config " + config("", "c2.yaml") + " --set model.init_from=" + weights.string());
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("an earlier run's " + weights.string() + " is kept as "));
  int kept = 0;
  for (const auto& e : fs::directory_iterator(out()))
    kept += e.path().filename().string().starts_with("model.safetensors.");
  EXPECT_EQ(kept, 1);
  // Off: nothing written.
  const ProgramResult off = run("--config " + config("", "c3.yaml") + " --set run.weights_file=");
  ASSERT_EQ(off.exit_code, 0) << off.output;
  EXPECT_THAT(off.output, ::testing::Not(HasSubstr("weights in")));
}

// A weights file in a folder of its own: the folder is made before training (the write came after
// it, and failed there, losing the weights); a folder that cannot be made stops the run at once.
TEST_F(Robustness, AWeightsFileInASubfolderIsWrittenThereOrRefusedBeforeTraining) {
  const ProgramResult r = run("--config " + config("") + " --set run.weights_file=final/w.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_regular_file(out() / "final" / "w.safetensors")) << r.output;
  std::ofstream(out() / "taken") << "a file";
  const ProgramResult blocked = run("--config " + config("", "c2.yaml") + " --set run.weights_file=taken/w.safetensors");
  expect_error(blocked, "run.weights_file: cannot create its folder '" + (out() / "taken").string() + "'");
  EXPECT_THAT(r.output, HasSubstr("epoch 1/"));
  EXPECT_THAT(blocked.output, ::testing::Not(HasSubstr("epoch 1/"))) << "refused before training";
  // A directory where the file goes: refused before training too, naming the key.
  fs::create_directories(out() / "dir.safetensors");
  const ProgramResult directory = run("--config " + config("", "c3.yaml") + " --set run.weights_file=dir.safetensors");
  expect_error(directory, "run.weights_file: '" + (out() / "dir.safetensors").string() +
                              "' is an existing directory, not a file; choose another run.weights_file");
  EXPECT_THAT(directory.output, ::testing::Not(HasSubstr("epoch 1/")));
  // A file where the checkpoints' folder goes: any run may write a checkpoint (a signal stops it
  // with one), so it is refused before training, not at the first save.
  fs::remove_all(out() / "dir.safetensors");
  std::ofstream(out() / "checkpoints") << "notes";
  const ProgramResult checkpoints = run("--config " + config("", "c4.yaml") + " --resume auto");
  expect_error(checkpoints, "run.output_dir: '" + (out() / "checkpoints").string() + "' is not a folder, and "
                            "checkpoints go there");
  EXPECT_THAT(checkpoints.output, ::testing::Not(HasSubstr("epoch 1/")));
  EXPECT_EQ(dp::testing::read_text_file(out() / "checkpoints"), "notes");
}

TEST_F(Robustness, AMetricsFileThatIsADirectoryIsLeftAlone) {
  fs::create_directories(out() / "m" / "inside");
  std::ofstream(out() / "m" / "inside" / "keep.txt") << "mine";
  expect_error(run("--config " + config("") + " --set run.metrics_file=m"),
               "run.metrics_file: '" + (out() / "m").string() + "' is an existing directory, not a file; choose "
               "another run.metrics_file or run.output_dir (nothing was moved)");
  EXPECT_EQ(dp::testing::read_text_file(out() / "m" / "inside" / "keep.txt"), "mine");
  EXPECT_EQ(std::distance(fs::directory_iterator(out()), fs::directory_iterator()), 1);
}

TEST_F(Robustness, ASymlinkedMetricsFileIsMovedAsidNotItsTarget) {
  fs::create_directories(out());
  std::ofstream(dir_ / "precious.txt") << "mine";
  fs::create_symlink(dir_ / "precious.txt", out() / "metrics.jsonl");
  const ProgramResult r = run("--config " + config(""));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(dp::testing::read_text_file(dir_ / "precious.txt"), "mine");
  EXPECT_FALSE(fs::is_symlink(out() / "metrics.jsonl"));
  int links = 0;
  for (const auto& e : fs::directory_iterator(out())) links += fs::is_symlink(e.symlink_status());
  EXPECT_EQ(links, 1);
}

// ---- Class 7: a signal ends the run cleanly ----
TEST_F(Robustness, SigtermFinishesTheStepWritesTheEndRecordAndExits143) {
  // A long run (50 epochs of 7500 steps; the signal comes after the first) reporting every step.
  const std::string cfg = config("data: {batch_size: 8}\n", "long.yaml");
  const ProgramResult r = signalled_run(dptrain_binary() + " --config " + cfg +
                                            " --set run.max_steps=0 --set run.epochs=50 --set run.log_every=1",
                                        out() / "metrics.jsonl", "TERM");
  EXPECT_EQ(r.exit_code, 128 + 15) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("stopped by SIGTERM after step [0-9]+ \\(epoch [0-9]+, step [0-9]+ of 7500\\); no evaluation"));
  EXPECT_THAT(r.output, HasSubstr("SIGTERM: ")) << r.output;
  const std::string end = last_line(metrics());
  EXPECT_THAT(end, HasSubstr("\"event\":\"end\"")) << end;
  EXPECT_THAT(end, HasSubstr("\"reason\":\"SIGTERM\"")) << end;
}

TEST_F(Robustness, SigintEndsTheRunTheSameWay) {
  const std::string cfg = config("data: {batch_size: 8}\n", "long.yaml");
  // env --default-signal: a shell starts a background job with SIGINT ignored, which dptrain
  // respects; an interactive user's dptrain has the default disposition.
  const ProgramResult r = signalled_run("env --default-signal=INT " + dptrain_binary() + " --config " + cfg +
                                            " --set run.max_steps=0 --set run.epochs=50 --set run.log_every=1",
                                        out() / "metrics.jsonl", "INT");
  EXPECT_EQ(r.exit_code, 128 + 2) << r.output;
  EXPECT_THAT(last_line(metrics()), HasSubstr("\"reason\":\"SIGINT\""));
}

}  // namespace
