// End-to-end, NOTE [ Resuming a run ] (launch/run_checkpoint.h): a run checkpointed, stopped and
// resumed ends with the model an uninterrupted run ends with, bit for bit, for every optimiser
// and with the loss scaler; SIGTERM saves at the step boundary; a checkpoint that does not fit
// the run is refused naming what differs; a full disk keeps the earlier checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::model_digest;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::HasSubstr;

class Resume : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = dp::testing::make_test_dir("dptrain_resume"); }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path out() const { return dir_ / "out"; }
  // A deterministic MLP with dropout on Fashion-MNIST (30 steps an epoch at batch 2000, 2 epochs),
  // writing into out(); `extra` is more YAML (sections other than run and data).
  std::string config(const std::string& extra, int batch = 2000) {
    const fs::path p = dir_ / "c.yaml";
    std::ofstream(p) << "run: {output_dir: " << out().string()
                     << ", threads: 1, epochs: 2, deterministic: true, log_every: 1}\n"
                     << "data: {batch_size: " << batch << ", eval_batch_size: 5000}\n"
                     << "model: {name: mlp, mlp_hidden: [24], dropout: 0.1}\n"
                     << extra;
    return p.string();
  }
  ProgramResult dptrain(const std::string& args) { return run_program(dptrain_binary() + " " + args); }
  // The uninterrupted run's digest after `steps` (in a folder of its own); `extra`: more arguments.
  std::string uninterrupted(const std::string& cfg, int steps, const std::string& extra = "") {
    const ProgramResult r = dptrain("--config " + cfg + " --set run.max_steps=" + std::to_string(steps) +
                                    " --set run.output_dir=" + (dir_ / "whole").string() + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return model_digest(r.output);
  }

  // The signalled runs: 20 epochs of 300 steps, so the signal always arrives mid-run however
  // slowly the test's shell polls on a loaded machine; the runs they are compared with stop at
  // 600 steps (run.max_steps may differ on resume; the constant schedule ignores the epochs).
  static constexpr const char* kLongRun = " --set run.epochs=20";

  fs::path dir_;
};

// N steps with a checkpoint at N, then --resume auto up to N + M (across the epoch boundary):
// the digest of the uninterrupted N + M steps. For every optimiser, in float32 and with the loss
// scaler (its scale and growth tracker saved too), on one process and on 2 ranks.
struct ResumeCase {
  const char* optimizer;
  bool loss_scaler;
  int ranks;
};

class ResumeEachOptimiser : public Resume, public ::testing::WithParamInterface<ResumeCase> {};

TEST_P(ResumeEachOptimiser, EndsWithTheUninterruptedModel) {
  const ResumeCase& c = GetParam();
  const std::string name = c.optimizer;
  std::string sections = "optimizer: {name: " + name + ", lr: 0.01}\n";
  if (name == "shampoo")
    sections = "optimizer: {name: shampoo, lr: 0.01, precondition_frequency: 4, max_preconditioner_dim: 16}\n";
  if (c.loss_scaler) sections += "loss_scale: {enabled: true, init_scale: 1024, growth_interval: 3}\n";
  const std::string cfg = config(sections);
  const std::string launcher = c.ranks > 1 ? dp::testing::mpirun(c.ranks) : "";
  auto dptrain_on_ranks = [&](const std::string& args) {
    const ProgramResult r = run_program(launcher + dptrain_binary() + " --config " + cfg + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r;
  };
  const std::string whole =
      model_digest(dptrain_on_ranks(" --set run.max_steps=40 --set run.output_dir=" + (dir_ / "whole").string()).output);
  ASSERT_EQ(whole.size(), 16u);
  const ProgramResult first = dptrain_on_ranks(" --set run.max_steps=25 --set run.checkpoint_every=25");
  EXPECT_THAT(first.output, HasSubstr("checkpoint " + (out() / "checkpoints" / "step_000000025").string()));
  EXPECT_NE(model_digest(first.output), whole);
  const ProgramResult resumed = dptrain_on_ranks(" --set run.max_steps=40 --resume auto");
  EXPECT_THAT(resumed.output, HasSubstr("after step 25 (epoch 1, step 25 of 30)"));  // 60,000 / 2000 a step
  EXPECT_EQ(model_digest(resumed.output), whole) << resumed.output;
}

std::vector<ResumeCase> every_optimiser_case() {
  std::vector<ResumeCase> cases;
  for (int ranks : {1, 2})
    for (const char* optimizer : {"sgd", "adamw", "lars", "lamb", "shampoo"})
      for (bool scaler : {false, true}) cases.push_back({optimizer, scaler, ranks});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Optimisers, ResumeEachOptimiser, ::testing::ValuesIn(every_optimiser_case()),
                         [](const auto& info) {
                           return std::string(info.param.optimizer) + (info.param.loss_scaler ? "_scaler" : "_fp32") +
                                  "_" + std::to_string(info.param.ranks) + "rank";
                         });

// Preemption: SIGTERM mid-epoch saves at the step boundary, exits 143, and --resume auto
// finishes the run as if nothing had happened. Checkpoints every epoch are written too, and the
// newest keep_checkpoints kept.
TEST_F(Resume, SigtermSavesAndTheResumedRunEndsWhereTheWholeRunEnds) {
  const std::string cfg = config("", /*batch=*/200);  // 300 steps an epoch
  const std::string whole = uninterrupted(cfg, 600, kLongRun);
  const ProgramResult stopped = dp::testing::signalled_run(
      dptrain_binary() + " --config " + cfg + kLongRun + " --set run.checkpoint_every_epochs=1",
      out() / "metrics.jsonl", "TERM");
  ASSERT_EQ(stopped.exit_code, 143) << stopped.output;
  EXPECT_THAT(stopped.output, HasSubstr("continue with --resume auto"));
  EXPECT_THAT(stopped.output, HasSubstr("checkpoint " + (out() / "checkpoints").string()));
  const ProgramResult resumed = dptrain("--config " + cfg + kLongRun +
                                        " --set run.checkpoint_every_epochs=1 --set run.max_steps=600 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from "));
  EXPECT_EQ(model_digest(resumed.output), whole) << resumed.output;
  // One metrics file for the whole run: the records the checkpoint kept, then the resumed ones —
  // a step record for each of the 600 steps, one resume record.
  const std::string metrics = dp::testing::read_text_file(out() / "metrics.jsonl");
  int step_records = 0, resumes = 0;
  for (size_t at = metrics.find("\"event\":\"step\""); at != std::string::npos;
       at = metrics.find("\"event\":\"step\"", at + 1))
    ++step_records;
  for (size_t at = metrics.find("\"event\":\"resume\""); at != std::string::npos;
       at = metrics.find("\"event\":\"resume\"", at + 1))
    ++resumes;
  EXPECT_EQ(step_records, 600);
  EXPECT_EQ(resumes, 1);
  int kept = 0;
  for (const auto& e : fs::directory_iterator(out() / "checkpoints")) kept += e.path().filename().string().starts_with("step_");
  EXPECT_EQ(kept, 2) << "run.keep_checkpoints: 2";
}

// SIGKILL at any moment, a save in progress included (a checkpoint every step, so that the kill
// often lands inside one): --resume auto takes the newest complete checkpoint, removes the
// unfinished one, and ends with the uninterrupted model.
TEST_F(Resume, SigkillAtAnyMomentLeavesTheLastCompleteCheckpoint) {
  const std::string cfg = config("optimizer: {name: adamw, lr: 0.001}\n", /*batch=*/200);
  const std::string whole = uninterrupted(cfg, 600, kLongRun);
  const ProgramResult killed = dp::testing::signalled_run(
      dptrain_binary() + " --config " + cfg + kLongRun + " --set run.checkpoint_every=1 --set run.keep_checkpoints=1",
      out() / "metrics.jsonl", "KILL");
  ASSERT_EQ(killed.exit_code, 128 + 9) << killed.output;
  const ProgramResult resumed = dptrain("--config " + cfg + kLongRun + " --set run.max_steps=600 --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(model_digest(resumed.output), whole) << resumed.output;
  // The kill may land before the first save made the directory (the run then started afresh).
  if (fs::exists(out() / "checkpoints")) {
    for (const auto& e : fs::directory_iterator(out() / "checkpoints"))
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  }
}

// Slurm's warning before a time limit (`--signal=USR1@T`) ends the run the same way, exit 138.
TEST_F(Resume, SigusrOneSavesAndExits138) {
  const std::string cfg = config("", /*batch=*/200);
  const ProgramResult stopped =
      dp::testing::signalled_run(dptrain_binary() + " --config " + cfg + kLongRun, out() / "metrics.jsonl", "USR1");
  ASSERT_EQ(stopped.exit_code, 128 + 10) << stopped.output;
  EXPECT_THAT(stopped.output, HasSubstr("stopped by SIGUSR1 after step"));
  EXPECT_THAT(dp::testing::read_text_file(out() / "metrics.jsonl"), HasSubstr("\"reason\":\"SIGUSR1\""));
  int saved = 0;
  for (const auto& e : fs::directory_iterator(out() / "checkpoints")) saved += e.path().filename().string().starts_with("step_");
  EXPECT_EQ(saved, 1);
}

// A checkpoint resumes only the run it belongs to: every key that changes what is computed is
// named; a missing directory is named; a fresh run moves an earlier run's checkpoints aside.
TEST_F(Resume, ACheckpointOfAnotherRunIsRefusedNamingTheDifferences) {
  const std::string cfg = config("optimizer: {name: sgd, lr: 0.05}\n");
  ASSERT_EQ(dptrain("--config " + cfg + " --set run.max_steps=3 --set run.checkpoint_every=3").exit_code, 0);
  const ProgramResult other = dptrain("--config " + cfg + " --set optimizer.lr=0.1 --set model.dropout=0.2 --resume auto");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.output, HasSubstr("differs from the checkpoint's in 2 keys"));
  EXPECT_THAT(other.output, HasSubstr("optimizer.lr: 0.05 in the checkpoint, 0.1 now"));
  EXPECT_THAT(other.output, HasSubstr("model.dropout: 0.1 in the checkpoint, 0.2 now"));
  const ProgramResult model = dptrain("--config " + cfg + " --set model.name=small_cnn --set model.dropout=0 "
                                      "--set 'model.mlp_hidden=[1024, 1024]' --resume auto");
  EXPECT_NE(model.exit_code, 0);
  EXPECT_THAT(model.output, HasSubstr("model.name: mlp in the checkpoint, small_cnn now"));
  // What does not change the computation may differ.
  const ProgramResult free = dptrain("--config " + cfg + " --set run.max_steps=4 --set data.loader_threads=2 "
                                     "--set run.log_every=7 --set run.target_accuracy=0.99 "
                                     "--set run.cpu_memory_limit_gib=8 --set distributed.checkpoint_timeout_s=60 "
                                     "--resume auto");
  EXPECT_EQ(free.exit_code, 0) << free.output;
  // A checkpoint past the run's end: nothing to train, and the run says so.
  const ProgramResult done = dptrain("--config " + cfg + " --set run.max_steps=2 --resume auto");
  EXPECT_EQ(done.exit_code, 0) << done.output;
  EXPECT_THAT(done.output, HasSubstr("nothing left to train: the checkpoint is past the run's end (run.epochs 2, "
                                     "run.max_steps 2); raise it to train on"));
  const ProgramResult missing = dptrain("--config " + cfg + " --resume " + (dir_ / "nowhere").string());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.output, HasSubstr("run.resume: '" + (dir_ / "nowhere").string() + "' is not a checkpoint"));
  // A fresh run in the same folder keeps the earlier checkpoints under another name.
  const ProgramResult fresh = dptrain("--config " + cfg + " --set run.max_steps=2");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_THAT(fresh.output, HasSubstr("are kept as " + (out() / "checkpoints.earlier.1").string() +
                                      " (to continue that run instead: --resume " +
                                      (out() / "checkpoints.earlier.1" / "step_000000003").string() + ")"));
  EXPECT_TRUE(fs::exists(out() / "checkpoints.earlier.1" / "step_000000003" / "checkpoint.json"));
}

// --resume auto takes the newest checkpoint; when that one is damaged, the error names the older
// complete one to resume from instead.
TEST_F(Resume, ADamagedNewestCheckpointNamesTheOlderOne) {
  const std::string cfg = config("optimizer: {name: sgd, lr: 0.05}\n");
  ASSERT_EQ(dptrain("--config " + cfg + " --set run.max_steps=4 --set run.checkpoint_every=2").exit_code, 0);
  const fs::path newest = out() / "checkpoints" / "step_000000004" / "model.safetensors";
  fs::resize_file(newest, fs::file_size(newest) - 4);
  const ProgramResult r = dptrain("--config " + cfg + " --resume auto");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(truncated or replaced)"));
  const std::string older = (out() / "checkpoints" / "step_000000002").string();
  EXPECT_THAT(r.output, HasSubstr("1 older one is there, the newest of them " + older + ": resume from it with "
                                  "--resume " + older));
  const ProgramResult from_older = dptrain("--config " + cfg + " --set run.max_steps=3 --resume " + older);
  EXPECT_EQ(from_older.exit_code, 0) << from_older.output;
}

// distributed.buffer_sync average keeps each rank's BatchNorm statistics until an evaluation
// averages them: the checkpoint keeps every rank's, so 2 ranks resume to the uninterrupted model
// (with rank 0's statistics on both, epoch 1's test loss and the final digest differed). Fixed
// shards on fewer ranks cannot keep them apart: refused.
TEST_F(Resume, AveragedBatchNormStatisticsResumePerRank) {
  const fs::path p = dir_ / "bn.yaml";
  std::ofstream(p) << "run: {output_dir: " << out().string() << ", threads: 1, epochs: 2, deterministic: true}\n"
                   << "data: {dataset: synthetic, synthetic_train_size: 256, synthetic_eval_size: 128, image_size: 32,"
                   << " eval_image_size: 32, eval_resize_size: 32, batch_size: 32, mean: [0.5], std: [0.5]}\n"
                   << "model: {name: resnet18}\n"
                   << "distributed: {buffer_sync: average}\n";
  const std::string two = dp::testing::mpirun(2) + dptrain_binary() + " --config " + p.string();
  const ProgramResult whole = run_program(two + " --set run.output_dir=" + (dir_ / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  ASSERT_EQ(run_program(two + " --set run.max_steps=4 --set run.checkpoint_every=4").exit_code, 0);
  const ProgramResult resumed = run_program(two + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("(epoch 1, step 4 of 8)"));
  EXPECT_EQ(model_digest(resumed.output), model_digest(whole.output));
  auto epoch1_test_loss = [](const std::string& output) {
    const size_t at = output.find("(loss ", output.find("\nepoch 1/2: "));
    return at == std::string::npos ? std::string() : output.substr(at, output.find(')', at) - at);
  };
  EXPECT_EQ(epoch1_test_loss(resumed.output), epoch1_test_loss(whole.output));
  EXPECT_NE(epoch1_test_loss(whole.output), "");
  const ProgramResult shards = dptrain("--config " + p.string() + " --set distributed.shards=2");
  EXPECT_EQ(shards.exit_code, 1) << shards.output;
  EXPECT_THAT(shards.output, HasSubstr("distributed.shards 2 on 1 rank with distributed.buffer_sync average"));
}

// "train loss 0.1234" of epoch `epoch`'s line; empty when absent.
std::string epoch_train_loss(const std::string& output, int epoch) {
  const size_t at = output.find("\nepoch " + std::to_string(epoch) + "/2: train loss ");
  return at == std::string::npos ? "" : output.substr(at + 1, output.find(',', at) - at - 1);
}

// The checkpoint keeps the epoch's loss so far: a resumed epoch reports the loss of the whole
// epoch, as the uninterrupted run does — also when the checkpoint is at the epoch's last step,
// where the resumed run has no step of it left to run (and says so instead of a throughput).
TEST_F(Resume, AResumedEpochReportsTheWholeEpochsLoss) {
  const std::string cfg = config("optimizer: {name: sgd, lr: 0.05}\n");  // 30 steps an epoch
  const ProgramResult whole = dptrain("--config " + cfg + " --set run.output_dir=" + (dir_ / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  ASSERT_THAT(epoch_train_loss(whole.output, 1), HasSubstr("train loss "));
  // Stopped at the end of epoch 1 (its checkpoint is at step 30 of 30), then resumed.
  ASSERT_EQ(dptrain("--config " + cfg + " --set run.max_steps=30 --set run.checkpoint_every=30").exit_code, 0);
  const ProgramResult at_end = dptrain("--config " + cfg + " --resume auto");
  ASSERT_EQ(at_end.exit_code, 0) << at_end.output;
  EXPECT_THAT(at_end.output, HasSubstr("(epoch 1, step 30 of 30)"));
  EXPECT_EQ(epoch_train_loss(at_end.output, 1), epoch_train_loss(whole.output, 1));
  EXPECT_THAT(at_end.output, HasSubstr("no step left to run after the resume"));
  EXPECT_EQ(epoch_train_loss(at_end.output, 2), epoch_train_loss(whole.output, 2));
  EXPECT_THAT(dp::testing::read_text_file(out() / "metrics.jsonl"), HasSubstr("\"samples_per_second\":null"));
  // Stopped inside epoch 2 (step 40), then resumed: epoch 2's loss is the whole epoch's.
  fs::remove_all(out());
  ASSERT_EQ(dptrain("--config " + cfg + " --set run.max_steps=40 --set run.checkpoint_every=40").exit_code, 0);
  const ProgramResult inside = dptrain("--config " + cfg + " --resume auto");
  ASSERT_EQ(inside.exit_code, 0) << inside.output;
  EXPECT_THAT(inside.output, HasSubstr("(epoch 2, step 10 of 30)"));
  EXPECT_EQ(epoch_train_loss(inside.output, 2), epoch_train_loss(whole.output, 2));
  EXPECT_EQ(dp::testing::model_digest(inside.output), dp::testing::model_digest(whole.output));
}

// A checkpoint written before a configuration key existed: its run computed what the key's default
// computes, so it resumes at the default and is refused at any other value.
TEST_F(Resume, AKeyNewerThanTheCheckpointResumesAtItsDefault) {
  const std::string cfg = config("optimizer: {name: sgd, lr: 0.05}\n");
  ASSERT_EQ(dptrain("--config " + cfg + " --set run.max_steps=3 --set run.checkpoint_every=3").exit_code, 0);
  const fs::path manifest = out() / "checkpoints" / "step_000000003" / "checkpoint.json";
  std::string text = dp::testing::read_text_file(manifest);
  const std::string line = "\\n  eval_every_samples: 0";  // as JSON escapes the recorded YAML
  const size_t at = text.find(line);
  ASSERT_NE(at, std::string::npos) << text;
  text.erase(at, line.size());
  // ... and before the manifest was covered by its own digest.
  const std::string digest = "\"manifest_fnv1a64\"";
  ASSERT_NE(text.find(digest), std::string::npos) << text;
  text.replace(text.find(digest), digest.size(), "\"unused_entry\"");
  std::ofstream(manifest, std::ios::trunc) << text;
  const ProgramResult other = dptrain("--config " + cfg + " --set run.eval_every_samples=1000 --resume auto");
  EXPECT_NE(other.exit_code, 0);
  EXPECT_THAT(other.output, HasSubstr("run.eval_every_samples: (absent) in the checkpoint, 1000 now"));
  const ProgramResult same = dptrain("--config " + cfg + " --set run.max_steps=4 --resume auto");
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

// A full disk during a save: a clear error naming the file, the earlier checkpoint intact and
// loadable, the metrics file ending with the error. Needs a small tmpfs (root may mount one).
TEST_F(Resume, AFullDiskKeepsTheEarlierCheckpoint) {
  const fs::path small = dir_ / "small";
  fs::create_directories(small);
  // Model + AdamW state of an MLP with 24 hidden units: ~0.23 MB a checkpoint; room for one.
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=400k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): the full-disk case is not run";
  const std::string cfg = config("optimizer: {name: adamw, lr: 0.001}\n");
  const ProgramResult r = dptrain("--config " + cfg + " --set run.output_dir=" + small.string() +
                                  " --set run.max_steps=4 --set run.checkpoint_every=2 --set run.keep_checkpoints=1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.exit_code, 128) << r.output;
  EXPECT_THAT(r.output, HasSubstr("step_000000004.tmp.")) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("No space left on device|failed")) << r.output;
  EXPECT_TRUE(fs::exists(small / "checkpoints" / "step_000000002" / "checkpoint.json"));
  const std::string metrics = dp::testing::read_text_file(small / "metrics.jsonl");
  EXPECT_THAT(metrics, HasSubstr("\"reason\":\"error\""));
  // The earlier checkpoint resumes (on a disk with room).
  const fs::path copy = dir_ / "copy";
  fs::create_directories(copy);
  fs::copy(small / "checkpoints", copy / "checkpoints", fs::copy_options::recursive);
  ::umount(small.c_str());
  const ProgramResult resumed = dptrain("--config " + cfg + " --set run.output_dir=" + copy.string() +
                                        " --set run.max_steps=4 --resume auto");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("after step 2"));
}

}  // namespace
