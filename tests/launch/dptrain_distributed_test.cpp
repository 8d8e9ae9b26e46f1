// End-to-end: dptrain started by real launchers — mpirun with 2 ranks, srun on a Slurm cluster
// (CI starts one with launch/local_slurm.sh) — and the distributed bad-input cases, each a clear
// error and a non-zero exit on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <string>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::model_digest;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::HasSubstr;
using ::testing::Not;

// mpirun as CI runs it: as root, more ranks than cores, a hard time limit (" -np N " follows).
const std::string kMpirun = "timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none";

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dptrain_distributed_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A short SmallCNN run (1 thread per rank) writing into the temp dir; `extra` is more YAML.
  std::string config(const std::string& name, const std::string& extra = "") {
    const fs::path p = dir_ / name;
    std::ofstream(p) << "run: {output_dir: " << (dir_ / "out").string()
                     << ", max_steps: 12, threads: 1, log_every: 4}\n"
                     << "data: {batch_size: 64, eval_batch_size: 2000}\n"
                     << extra;
    return p.string();
  }
  // dptrain's arguments for a deterministic ResNet-18 run of `steps` steps (batch 32) on
  // synthetic 32x32 images, with `optimizer` as the optimizer section.
  std::string resnet18_synthetic_args(const std::string& optimizer, int steps, int train_size, int eval_size) {
    return " --config " + config("resnet18.yaml", "model: {name: resnet18, num_classes: 10}\noptimizer: " + optimizer +
                                                      "\n") +
           " --set run.max_steps=" + std::to_string(steps) +
           " --set run.deterministic=true --set data.dataset=synthetic --set data.synthetic_train_size=" +
           std::to_string(train_size) + " --set data.synthetic_eval_size=" + std::to_string(eval_size) +
           " --set data.batch_size=32 --set data.eval_batch_size=32 --set data.image_size=32"
           " --set data.eval_resize_size=32 --set data.eval_image_size=32";
  }
  void expect_error_on_every_rank(const ProgramResult& r, const std::string& message) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "timed out instead of failing: " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message));
  }

  fs::path dir_;
};

// A scaling study in small (NOTE [ Scaling report ]): the same recipe on one process and on two
// ranks, each in its own folder, then `dptrain scaling-report` over both.
TEST_F(Distributed, ScalingReportComparesAOneAndATwoRankRun) {
  const std::string args = " --config " + config("c.yaml") + " --set run.output_dir=";
  const ProgramResult one = run_program(dptrain_binary() + args + (dir_ / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const ProgramResult two = run_program(kMpirun + " -np 2 " + dptrain_binary() + args + (dir_ / "two").string());
  ASSERT_EQ(two.exit_code, 0) << two.output;
  std::ifstream start_record(dir_ / "two" / "metrics.jsonl");
  std::string start;
  std::getline(start_record, start);
  EXPECT_THAT(start, HasSubstr("\"world_size\":2"));
  EXPECT_THAT(start, HasSubstr("\"nodes\":1"));
  EXPECT_THAT(start, HasSubstr("\"global_batch\":64"));
  EXPECT_THAT(start, HasSubstr("\"per_rank_batch\":32"));
  const ProgramResult report = run_program(dptrain_binary() + " scaling-report " + (dir_ / "one").string() + " " +
                                           (dir_ / "two").string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_THAT(report.output, HasSubstr("small_cnn, fp32, cpu; strong scaling: global batch 64 in every run; baseline " +
                                       (dir_ / "one").string() + " (1 rank)"));
  EXPECT_THAT(report.output, HasSubstr((dir_ / "one").string() + " (baseline)"));
  EXPECT_THAT(report.output, HasSubstr("hidden"));
  EXPECT_THAT(report.output, Not(HasSubstr("warning")));
  const ProgramResult missing = run_program(dptrain_binary() + " scaling-report " + (dir_ / "three").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("dptrain: error: scaling-report: cannot open"));
}

TEST_F(Distributed, MpirunTwoRanksTrainsWithOneVoice) {
  const ProgramResult r = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("c.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data-parallel over 2 ranks (mpi): batch 32 per rank"));
  EXPECT_THAT(r.output, HasSubstr("% hidden behind backward"));
  EXPECT_EQ(count(r.output, "done: 12 steps"), 1) << "only rank 0 prints: " << r.output;
  // Open MPI gives each rank a pseudo-terminal even when mpirun's output is a pipe or a file:
  // the progress line must not be redrawn there (issue 10).
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("\033[K")));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("\r")));
  std::ifstream metrics(dir_ / "out" / "metrics.jsonl");
  const std::string text((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"world_size\":2"));
  EXPECT_THAT(text, HasSubstr("\"hidden_pct\""));
}

TEST_F(Distributed, MpirunTwoRanksSendGradientsAsBf16) {
  const ProgramResult r = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " +
                                      config("c.yaml", "distributed: {grad_dtype: bf16}\n"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("gradient buckets, sent as bf16"));
  EXPECT_EQ(count(r.output, "done: 12 steps"), 1) << r.output;
  std::ifstream metrics(dir_ / "out" / "metrics.jsonl");
  const std::string text((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"grad_dtype\":\"bf16\""));
}

TEST_F(Distributed, TwoRanksStepsReadNothingOnTheHost) {
  // run.check_host_syncs over the reducer's whole path: buckets, bf16 wire, rank-ordered sums, and
  // the one-off re-plan from rank 0's gradient order in the second step (a deliberate read).
  const ProgramResult r = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " +
                                      config("c.yaml", "distributed: {grad_dtype: bf16}\n") +
                                      " --set run.check_host_syncs=true --set run.deterministic=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "done: 12 steps"), 1) << r.output;
}

TEST_F(Distributed, GlobalBatchTheWorldSizeDoesNotDivide) {
  expect_error_on_every_rank(
      run_program(kMpirun + " -np 3 " + dptrain_binary() + " --config " + config("c.yaml")),
      "data.batch_size 64 is the global batch and must be divisible by the world size 3");
}

TEST_F(Distributed, ConfigsThatDifferAcrossRanks) {
  const std::string a = config("a.yaml"), b = config("b.yaml", "optimizer: {lr: 0.01}\n");
  const ProgramResult r = run_program(kMpirun + " -np 1 " + dptrain_binary() + " --config " + a + " : -np 1 " +
                                      dptrain_binary() + " --config " + b);
  expect_error_on_every_rank(r, "rank(s) 1 resolved a different configuration from rank 0");
  // The rank that differs names the keys.
  EXPECT_THAT(r.output, ::testing::MatchesRegex("(.|\n)*\n  optimizer\.lr: [0-9.e-]+ on rank 0, 0\.01 on rank 1(.|\n)*"));
}

// The same recipe, a relative data.root read from each rank's own working directory: rank 1's copy
// of the image folder has one image filed under another class (same count, other labels), then
// one image fewer. Each trained without a word before (or failed epochs later as a desync).
TEST_F(Distributed, RanksThatLoadedDifferentDataAreStoppedBeforeTraining) {
  const fs::path a = dir_ / "node_a", b = dir_ / "node_b";
  const ProgramResult made = run_program(fs::path(dptrain_binary()).parent_path().string() +
                                         "/make_image_folder --source fashion_mnist --out " + (a / "data").string() +
                                         " --size 32 --train-limit 40 --val-limit 20");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  fs::copy(a, b, fs::copy_options::recursive);
  std::vector<fs::path> classes;
  for (const auto& e : fs::directory_iterator(b / "data" / "train")) classes.push_back(e.path());
  std::sort(classes.begin(), classes.end());
  ASSERT_GE(classes.size(), 2u);
  const fs::path moved = fs::directory_iterator(classes[0])->path();
  fs::rename(moved, classes[1] / moved.filename());
  const std::string cfg = config("folder.yaml", "model: {name: small_cnn, num_classes: 10}\n") +
                          " --set data.dataset=image_folder --set data.root=data --set data.batch_size=8"
                          " --set data.eval_batch_size=10 --set data.image_size=28 --set data.eval_resize_size=32"
                          " --set data.eval_image_size=28";
  const auto both = [&] {
    return run_program(kMpirun + " -np 1 --wdir " + a.string() + " " + dptrain_binary() + " --config " + cfg +
                       " : -np 1 --wdir " + b.string() + " " + dptrain_binary() + " --config " + cfg);
  };
  const ProgramResult relabelled = both();
  expect_error_on_every_rank(relabelled, "the ranks loaded different training data: rank 0 has 40 samples, rank 1 "
                                         "has 40 samples with other contents (this rank read image folder data/train");
  EXPECT_THAT(relabelled.output, HasSubstr("check data.root on each node"));
  fs::remove(classes[1] / moved.filename());
  expect_error_on_every_rank(both(), "rank 0 has 40 samples, rank 1 has 39 samples (this rank read");
  fs::remove_all(b);
  fs::copy(a, b, fs::copy_options::recursive);
  const ProgramResult same = both();
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

TEST_F(Distributed, UnknownBackend) {
  const ProgramResult r = run_program(dptrain_binary() + " --config " + config("c.yaml", "distributed: {backend: gloo}\n"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("distributed.backend"));
  EXPECT_THAT(r.output, HasSubstr("gloo"));
}

// What srun without PMIx gives each task: Slurm's variables and no PMIx (docs/slurm.md).
TEST_F(Distributed, SrunWithoutPmixIsRefusedBeforeMpiStarts) {
  const ProgramResult r = run_program(
      "env -u PMIX_RANK -u OMPI_COMM_WORLD_RANK SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=1 " +
      dptrain_binary() + " --config " + config("c.yaml"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("without PMIx"));
  EXPECT_THAT(r.output, HasSubstr("srun --mpi=pmix"));
}

// The pid of the dptrain process that runs as `rank` with `marker` on its command line (from
// /proc: the rank is in its environment as OMPI_COMM_WORLD_RANK), or -1.
int find_rank_pid(const std::string& marker, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(entry.path() / "cmdline"), environ(entry.path() / "environ");
    const std::string cmd((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    if (cmd.find("launch/dptrain") == std::string::npos || cmd.find(marker) == std::string::npos) continue;
    const std::string env((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    if (env.find(std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0') != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

// Starts a 2-rank run under mpirun (with `mpirun_flags`), SIGKILLs rank 1 once training runs and
// returns (exit code, seconds from the kill to the job's end, output).
struct KilledRun {
  int exit_code = -1;
  double seconds = 0;
  std::string output;
};

KilledRun kill_rank_one(const fs::path& dir, const std::string& cfg, const std::string& mpirun_flags) {
  const fs::path out = dir / "job.out", rc = dir / "job.rc";
  std::system(("(" + kMpirun + " " + mpirun_flags + " -np 2 " + dptrain_binary() + " --config " + cfg +
               " --set run.max_steps=100000 > " + out.string() + " 2>&1; echo $? > " + rc.string() + ".tmp && mv " +
               rc.string() + ".tmp " + rc.string() + ") &")
                  .c_str());
  // Wait until training runs (a step record), then SIGKILL rank 1.
  const auto metrics = dir / "out" / "metrics.jsonl";
  int victim = -1;
  for (int i = 0; i < 600 && victim < 0; ++i) {
    std::ifstream m(metrics);
    const std::string text((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
    if (text.find("\"event\":\"step\"") != std::string::npos) victim = find_rank_pid(cfg, 1);
    if (victim < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  KilledRun result;
  if (victim < 0) {
    result.output = "training did not start within 60 s";
    return result;
  }
  const auto killed_at = std::chrono::steady_clock::now();
  ::kill(victim, SIGKILL);
  while (!fs::exists(rc) && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::ifstream rc_in(rc), out_in(out);
  if (fs::exists(rc)) rc_in >> result.exit_code;
  result.output.assign(std::istreambuf_iterator<char>(out_in), std::istreambuf_iterator<char>());
  return result;
}

TEST_F(Distributed, KilledRankEndsEveryRankNamingIt) {
  const KilledRun r = kill_rank_one(dir_, config("long.yaml"), "");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << "the job still runs 60 s after rank 1 was killed: " << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("rank 1.*(signal 9|Killed|stopped making progress)")) << r.output;
}

// The same where the launcher does not end the job when a process dies (as srun without
// --kill-on-bad-exit): rank 0's watchdog, set by distributed.timeout_s, names rank 1 and aborts.
TEST_F(Distributed, WatchdogFromTheConfigNamesAKilledRank) {
  const KilledRun r = kill_rank_one(dir_, config("long.yaml", "distributed: {timeout_s: 5}\n"),
                                    "--mca orte_abort_on_non_zero_status 0");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << "the job still runs 60 s after rank 1 was killed: " << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("timeout 5.0 s.*rank 1 stopped making progress")) << r.output;
}

// Starts `dptrain` (a command line) on 2 ranks with `launcher`, and once its first step is logged
// in `metrics` sends SIGTERM to one rank only; returns what the launch exited with. pgrep -x -f
// matches the ranks' exact command line, not the launcher's or the shell's.
ProgramResult signal_one_rank(const std::string& launcher, const std::string& dptrain, const fs::path& metrics) {
  return dp::testing::signalled_run(launcher + dptrain, metrics, "TERM",
                                    "$(pgrep -x -f '" + dptrain + "' | head -n 1)");
}

// SIGTERM to one rank of a 2-rank job (a user's kill, or the first task Slurm reaches): the ranks
// agree to stop after the same step, rank 0 writes the end record, and every rank exits 143.
TEST_F(Distributed, SigtermToOneRankStopsEveryRankAfterTheSameStep) {
  const std::string cfg = config("long.yaml");
  const std::string dptrain = dptrain_binary() + " --config " + cfg + " --set run.max_steps=0 --set run.log_every=1";
  const fs::path metrics = dir_ / "out" / "metrics.jsonl";
  const ProgramResult r = signal_one_rank(kMpirun + " -np 2 ", dptrain, metrics);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "timed out: " << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("stopped by SIGTERM after step [0-9]+")) << r.output;
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("MPI_ABORT"))) << r.output;
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  EXPECT_THAT(last, HasSubstr("\"reason\":\"SIGTERM\"")) << last;
}

// Preemption end to end (NOTE [ Resuming a run ]): SIGTERM to one rank of a 2-rank job mid-epoch;
// every rank stops after the same step, rank 0 saves it, the job exits 143, and `--resume auto`
// ends with the model of the uninterrupted run, bit for bit. `launcher` runs 2 ranks.
// The signalled run has the epoch's 938 steps ahead of it (no step limit), so the signal lands
// mid-run however slowly the shell polls; the whole and the resumed run stop at step 300.
void preempt_and_resume(const fs::path& dir, const std::string& launcher, const std::string& cfg) {
  const std::string args = " --config " + cfg + " --set run.deterministic=true --set run.log_every=1";
  const std::string to_300 = " --set run.max_steps=300";
  const ProgramResult whole =
      run_program(launcher + dptrain_binary() + args + to_300 + " --set run.output_dir=" + (dir / "whole").string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string dptrain = dptrain_binary() + args;
  const ProgramResult stopped =
      signal_one_rank(launcher, dptrain + " --set run.max_steps=0", dir / "out" / "metrics.jsonl");
  ASSERT_NE(stopped.exit_code, 0) << "the run ended before the signal: " << stopped.output;
  EXPECT_EQ(stopped.exit_code, 143) << stopped.output;
  EXPECT_THAT(stopped.output, ::testing::ContainsRegex("checkpoint .*step_0+[1-9][0-9]* \\(step")) << stopped.output;
  const ProgramResult resumed = run_program(launcher + dptrain + to_300 + " --resume auto");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resumed from "));
  EXPECT_EQ(model_digest(resumed.output), model_digest(whole.output)) << resumed.output;
}

TEST_F(Distributed, MpirunPreemptedBySigtermResumesToTheUninterruptedModel) {
  preempt_and_resume(dir_, kMpirun + " -np 2 ", config("c.yaml"));
}

// run.deterministic: two launches of the same 2-rank job end with the same model, bit for bit
// (the digest of every parameter and buffer that rank 0 prints).

TEST_F(Distributed, DeterministicRunsAreBitwiseIdentical) {
  const std::string cfg = config("c.yaml");
  std::string digests[2];
  for (std::string& digest : digests) {
    const ProgramResult r =
        run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + cfg + " --set run.deterministic=true");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    digest = model_digest(r.output);
    ASSERT_EQ(digest.size(), 16u) << r.output;
  }
  EXPECT_EQ(digests[0], digests[1]);
}

// The number after "key": in the metrics log's first record of `event` (epoch, step).
double metrics_figure(const fs::path& metrics, const std::string& key, const std::string& event = "epoch") {
  const std::string text = dp::testing::read_text_file(metrics);
  const size_t at = text.find("\"event\":\"" + event + "\"");
  const size_t k = at == std::string::npos ? at : text.find("\"" + key + "\":", at);
  if (k == std::string::npos) ADD_FAILURE() << "no " << key << " in the " << event << " record of " << text;
  return k == std::string::npos ? std::nan("") : std::stod(text.substr(k + key.size() + 3));
}

// distributed.sync_batchnorm (comm/ddp/sync_batch_norm.h): 2 ranks with half the batch each
// compute what one process computes on the whole batch. One step of a ResNet-18 (20 BatchNorm
// layers): the step's loss (forward over the global batch) and the evaluation after the update
// (backward, all-reduce, SGD, running statistics) agree with the 1-process run within 1e-5;
// with per-rank statistics the same 2-rank run misses by far more.
TEST_F(Distributed, SyncBatchNormTwoRanksMatchOneProcess) {
  const std::string common = resnet18_synthetic_args("{name: sgd, lr: 0.01, momentum: 0.9}", 1, 64, 64);
  auto run = [&](const std::string& launcher, const std::string& name, const std::string& extra) {
    const ProgramResult r = run_program(launcher + dptrain_binary() + common + " --set run.output_dir=" +
                                        (dir_ / name).string() + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const fs::path metrics = dir_ / name / "metrics.jsonl";
    // The step record's loss is the global batch's (the mean over ranks), as the epoch's is.
    EXPECT_NEAR(metrics_figure(metrics, "loss", "step"), metrics_figure(metrics, "train_loss"), 1e-6) << name;
    return std::pair{metrics_figure(metrics, "train_loss"), metrics_figure(metrics, "test_loss")};
  };
  const auto one = run("", "one", "");
  const auto synced = run(kMpirun + " -np 2 ", "synced", " --set distributed.sync_batchnorm=true");
  const auto local = run(kMpirun + " -np 2 ", "local", "");
  EXPECT_NEAR(synced.first, one.first, 1e-5 * one.first);
  EXPECT_NEAR(synced.second, one.second, 1e-5 * one.second);
  EXPECT_GT(std::abs(local.first - one.first), 1e-3 * one.first) << "per-rank statistics should differ";
}

// NOTE [ Fixed shards ] (launch/training_run.h): with distributed.shards: 2 one process trains
// the two shards one after another and ends with the model two ranks end with, bit for bit (the
// digest of every parameter and buffer), over several ResNet-18 steps with momentum and
// BatchNorm over each shard. The plain 2-rank run is the same computation (its average divides
// by 2 exactly); the plain 1-process run normalises over the whole batch and ends elsewhere.
TEST_F(Distributed, FixedShardsOneProcessEndsWhereTwoRanksEnd) {
  const std::string common =
      resnet18_synthetic_args("{name: sgd, lr: 0.05, momentum: 0.9, weight_decay: 1.0e-4}", 4, 128, 32);
  auto digest_of = [&](const std::string& launcher, const std::string& extra) {
    const ProgramResult r = run_program(launcher + dptrain_binary() + common + extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return model_digest(r.output);
  };
  const std::string sharded_one = digest_of("", " --set distributed.shards=2");
  ASSERT_EQ(sharded_one.size(), 16u);
  EXPECT_EQ(digest_of(kMpirun + " -np 2 ", " --set distributed.shards=2"), sharded_one);
  EXPECT_EQ(digest_of(kMpirun + " -np 2 ", ""), sharded_one);
  EXPECT_NE(digest_of("", ""), sharded_one) << "BatchNorm over the whole batch should end elsewhere";
}

// distributed.shards that the world size does not divide, or with synchronised BatchNorm over
// micro-batches: a clear error naming the key on every rank.
TEST_F(Distributed, FixedShardsThatCannotWorkAreRefused) {
  const ProgramResult r = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("c.yaml") +
                                      " --set distributed.shards=3");
  expect_error_on_every_rank(r, "distributed.shards 3 must be a multiple of the world size 2");
  const ProgramResult sync = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("c.yaml") +
                                         " --set distributed.shards=4 --set distributed.sync_batchnorm=true");
  expect_error_on_every_rank(sync, "distributed.sync_batchnorm normalises over the global batch");
}

// NOTE [ Resuming a run ] under mpirun: 2 ranks checkpoint after 6 steps and resume to 12 with the
// uninterrupted model's digest; one process may not continue a 2-rank checkpoint (each rank's
// batch would change) unless the run has fixed shards, and then it ends where the 2 ranks end.
TEST_F(Distributed, TwoRanksResumeBitForBitAndFixedShardsResumeOnOneProcess) {
  const std::string plain = config("c.yaml");
  auto run = [&](const std::string& launcher, const std::string& args) {
    const ProgramResult r = run_program(launcher + dptrain_binary() + " --config " + plain +
                                        " --set run.deterministic=true" + args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r;
  };
  const std::string two = kMpirun + " -np 2 ";
  const std::string whole = model_digest(run(two, " --set run.output_dir=" + (dir_ / "whole").string()).output);
  run(two, " --set run.max_steps=6 --set run.checkpoint_every=6");
  const ProgramResult resumed = run(two, " --resume auto");
  EXPECT_THAT(resumed.output, HasSubstr("after step 6"));
  EXPECT_EQ(model_digest(resumed.output), whole);
  const ProgramResult one = run_program(dptrain_binary() + " --config " + plain +
                                        " --set run.deterministic=true --resume auto");
  EXPECT_NE(one.exit_code, 0);
  EXPECT_THAT(one.output, HasSubstr("written by 2 ranks, resumed on 1"));

  // distributed.shards: 2 — written by 2 ranks, finished by one process.
  const std::string sharded = " --set distributed.shards=2 --set run.output_dir=" + (dir_ / "sharded").string();
  const std::string whole_sharded =
      model_digest(run(two, " --set distributed.shards=2 --set run.output_dir=" + (dir_ / "whole2").string()).output);
  run(two, sharded + " --set run.max_steps=6 --set run.checkpoint_every=6");
  const ProgramResult finished = run("", sharded + " --resume auto");
  EXPECT_THAT(finished.output, HasSubstr("after step 6"));
  EXPECT_EQ(model_digest(finished.output), whole_sharded);
}

// A node that answers: idle, or busy with another test's job (ctest -j runs the srun tests side by side).
bool slurm_cluster_reachable() {
  if (!std::getenv("SLURM_CONF")) return false;
  const std::string state = run_program("timeout 10 sinfo -h -o %T").output;
  for (const char* up : {"idle", "mixed", "allocated", "completing"})
    if (state.find(up) != std::string::npos) return true;
  return false;
}

TEST_F(Distributed, SrunTwoTasks) {
  if (!slurm_cluster_reachable())
    GTEST_SKIP() << "no Slurm cluster: start one with `eval \"$(launch/local_slurm.sh start)\"` (as CI does)";
  const ProgramResult r =
      run_program("timeout 300 srun --quiet -n 2 " + dptrain_binary() + " --config " + config("c.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data-parallel over 2 ranks"));
  EXPECT_EQ(count(r.output, "done: 12 steps"), 1) << r.output;
}

TEST_F(Distributed, SrunPreemptedBySigtermResumesToTheUninterruptedModel) {
  if (!slurm_cluster_reachable())
    GTEST_SKIP() << "no Slurm cluster: start one with `eval \"$(launch/local_slurm.sh start)\"` (as CI does)";
  preempt_and_resume(dir_, "timeout 300 srun --quiet -n 2 ", config("c.yaml"));
}

TEST_F(Distributed, SrunWithoutPmixOnARealCluster) {
  if (!slurm_cluster_reachable())
    GTEST_SKIP() << "no Slurm cluster: start one with `eval \"$(launch/local_slurm.sh start)\"` (as CI does)";
  const ProgramResult r =
      run_program("timeout 120 srun --quiet --mpi=none -n 2 " + dptrain_binary() + " --config " + config("c.yaml"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "without PMIx"), 2) << "each rank says why: " << r.output;
}

// scancel --signal=TERM (what a job's time limit or a user's scancel sends) reaches every task:
// both stop after the same step, the end record names the signal, and srun reports 143.
TEST_F(Distributed, ScancelEndsAnSrunJobCleanly) {
  if (!slurm_cluster_reachable())
    GTEST_SKIP() << "no Slurm cluster: start one with `eval \"$(launch/local_slurm.sh start)\"` (as CI does)";
  const std::string job = "dptrain_scancel_" + std::to_string(::getpid());
  const fs::path metrics = dir_ / "out" / "metrics.jsonl", script = dir_ / "scancel.sh";
  std::ofstream(script) << "timeout 300 srun --quiet -J " << job << " -n 2 " << dptrain_binary() << " --config "
                        << config("long.yaml") << " --set run.max_steps=0 --set run.log_every=1 &\n"
                        << "p=$!; i=0\n"
                        << "while [ $i -lt 1200 ] && ! grep -qs '\"event\":\"step\"' '" << metrics.string()
                        << "'; do sleep 0.05; i=$((i+1)); done\n"
                        << "scancel --signal=TERM --name=" << job << "\n"
                        << "wait $p\n";
  const ProgramResult r = run_program("sh " + script.string());
  EXPECT_EQ(r.exit_code, 143) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("stopped by SIGTERM after step [0-9]+")) << r.output;
  std::ifstream in(metrics);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  EXPECT_THAT(last, HasSubstr("\"reason\":\"SIGTERM\"")) << last;
}

}  // namespace
