// End-to-end: dptrain started by real launchers — mpirun with 2 ranks, srun on a Slurm cluster
// (CI starts one with launch/local_slurm.sh) — and the distributed bad-input cases, each a clear
// error and a non-zero exit on every rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_program.h"

namespace {

namespace fs = std::filesystem;
using dp::testing::dptrain_binary;
using dp::testing::ProgramResult;
using dp::testing::run_program;
using ::testing::HasSubstr;

// mpirun as CI runs it: as root, more ranks than cores, a hard time limit.
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
  void expect_error_on_every_rank(const ProgramResult& r, const std::string& message) {
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.exit_code, 124) << "timed out instead of failing: " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message));
  }

  fs::path dir_;
};

TEST_F(Distributed, MpirunTwoRanksTrainsWithOneVoice) {
  const ProgramResult r = run_program(kMpirun + " -np 2 " + dptrain_binary() + " --config " + config("c.yaml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("data-parallel over 2 ranks (mpi): batch 32 per rank"));
  EXPECT_THAT(r.output, HasSubstr("% hidden behind backward"));
  EXPECT_EQ(count(r.output, "done: 12 steps"), 1) << "only rank 0 prints: " << r.output;
  std::ifstream metrics(dir_ / "out" / "metrics.jsonl");
  const std::string text((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"world_size\":2"));
  EXPECT_THAT(text, HasSubstr("\"hidden_pct\""));
}

TEST_F(Distributed, GlobalBatchTheWorldSizeDoesNotDivide) {
  expect_error_on_every_rank(
      run_program(kMpirun + " -np 3 " + dptrain_binary() + " --config " + config("c.yaml")),
      "data.batch_size 64 is the global batch and must be divisible by the world size 3");
}

TEST_F(Distributed, ConfigsThatDifferAcrossRanks) {
  const std::string a = config("a.yaml"), b = config("b.yaml", "optimizer: {lr: 0.01}\n");
  expect_error_on_every_rank(run_program(kMpirun + " -np 1 " + dptrain_binary() + " --config " + a + " : -np 1 " +
                                         dptrain_binary() + " --config " + b),
                             "rank(s) 1 resolved a different configuration from rank 0");
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

// A real Slurm: CI's .ci/run starts one (launch/local_slurm.sh) and exports SLURM_CONF.
bool slurm_cluster_reachable() {
  return std::getenv("SLURM_CONF") && run_program("timeout 10 sinfo -h -o %T").output.find("idle") != std::string::npos;
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

TEST_F(Distributed, SrunWithoutPmixOnARealCluster) {
  if (!slurm_cluster_reachable())
    GTEST_SKIP() << "no Slurm cluster: start one with `eval \"$(launch/local_slurm.sh start)\"` (as CI does)";
  const ProgramResult r =
      run_program("timeout 120 srun --quiet --mpi=none -n 2 " + dptrain_binary() + " --config " + config("c.yaml"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "without PMIx"), 2) << "each rank says why: " << r.output;
}

}  // namespace
