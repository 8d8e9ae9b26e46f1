// World discovery without MPI: launcher variables parsed from an env map, then checked against
// a given MPI layout (the multi-rank check against a live MPI is in tests/comm/mpi/).
#include <gtest/gtest.h>

#include <cstdlib>

#include "comm/world.h"
#include "common/expect_error.h"

namespace dp {
namespace {

TEST(LauncherEnv, NoLauncherVariables) {
  LauncherEnv l = parse_launcher_env({{"HOME", "/root"}});
  EXPECT_EQ(l.launcher, "none");
  EXPECT_FALSE(l.rank || l.size || l.local_rank);
}

TEST(LauncherEnv, OpenMpi) {
  LauncherEnv l = parse_launcher_env(
      {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.rank, 3);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.size_var, "OMPI_COMM_WORLD_SIZE");
}

TEST(LauncherEnv, SlurmPrefersTheStepTaskCount) {
  EnvMap env{{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "0"}};
  LauncherEnv job = parse_launcher_env(env);
  EXPECT_EQ(job.launcher, "slurm");
  EXPECT_EQ(job.rank, 1);
  EXPECT_EQ(job.size, 8);
  EXPECT_EQ(job.local_rank, 0);
  EXPECT_EQ(job.size_var, "SLURM_NTASKS");
  env["SLURM_STEP_NUM_TASKS"] = "2";  // srun -n 2 inside an 8-task allocation
  LauncherEnv step = parse_launcher_env(env);
  EXPECT_EQ(step.size, 2);
  EXPECT_EQ(step.size_var, "SLURM_STEP_NUM_TASKS");
}

TEST(LauncherEnv, PmixGivesOnlyTheRank) {
  LauncherEnv l = parse_launcher_env({{"PMIX_RANK", "5"}});
  EXPECT_EQ(l.launcher, "pmix");
  EXPECT_EQ(l.rank, 5);
  EXPECT_FALSE(l.size || l.local_rank);
}

// mpirun inside an sbatch script: the batch shell's SLURM_PROCID=0 is inherited by every rank,
// so Open MPI's per-process variables must win.
TEST(LauncherEnv, OpenMpiWinsOverInheritedSlurmVariables) {
  LauncherEnv l = parse_launcher_env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"PMIX_RANK", "2"},
                                      {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_EQ(l.launcher, "openmpi");
  EXPECT_EQ(l.rank, 2);
}

TEST(LauncherEnv, SlurmWinsOverPmix) {
  LauncherEnv l = parse_launcher_env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"PMIX_RANK", "1"}});
  EXPECT_EQ(l.launcher, "slurm");
  EXPECT_EQ(l.size, 2);
}

TEST(LauncherEnv, MalformedValuesNameTheVariable) {
  for (const char* bad : {"abc", "-1", "3x", "", " 1", "99999999999"}) {
    EXPECT_ERROR_CONTAINS(parse_launcher_env({{"SLURM_PROCID", bad}, {"SLURM_NTASKS", "2"}}),
                          std::string("SLURM_PROCID='") + bad + "' is not a non-negative integer");
  }
  EXPECT_ERROR_CONTAINS(parse_launcher_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}}),
                        "OMPI_COMM_WORLD_SIZE=0: a world needs at least one rank");
  EXPECT_ERROR_CONTAINS(parse_launcher_env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "2"}}),
                        "SLURM_PROCID=2 is not below SLURM_NTASKS=2");
}

TEST(ReconcileWorld, AgreeingLaunchersGiveMpisLayout) {
  World w = reconcile_world(parse_launcher_env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}}),
                            MpiLayout{1, 4, 1, 2});
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 2);
  EXPECT_EQ(w.launcher, "openmpi");
}

TEST(ReconcileWorld, NoLauncherTakesMpiAsItIs) {
  World w = reconcile_world(parse_launcher_env({}), MpiLayout{0, 1, 0, 1});
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.launcher, "none");
}

// The local rank is MPI's shared-memory numbering even when the launcher gives none (PMIx).
TEST(ReconcileWorld, LocalRankComesFromMpi) {
  World w = reconcile_world(parse_launcher_env({{"PMIX_RANK", "5"}}), MpiLayout{5, 8, 1, 4, 2});
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 4);
  EXPECT_EQ(w.nodes, 2);
}

TEST(ReconcileWorld, SrunWithoutPmixSaysHowToLaunch) {
  LauncherEnv l = parse_launcher_env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1"}});
  std::string message = testing::error_of([&] { reconcile_world(l, MpiLayout{0, 1, 0, 1}); });
  EXPECT_NE(message.find("Slurm started 2 tasks (SLURM_NTASKS=2, this is SLURM_PROCID=1)"), std::string::npos)
      << message;
  EXPECT_NE(message.find("MPI_COMM_WORLD has 1 rank"), std::string::npos) << message;
  EXPECT_NE(message.find("`srun --mpi=pmix ...`"), std::string::npos) << message;
}

TEST(ReconcileWorld, SizeMismatchUnderMpirun) {
  EXPECT_ERROR_CONTAINS(
      reconcile_world(parse_launcher_env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}}),
                      MpiLayout{0, 2, 0, 2}),
      "mpirun started 4 ranks (OMPI_COMM_WORLD_SIZE=4) but MPI_COMM_WORLD has 2");
}

TEST(ReconcileWorld, RankMismatch) {
  EXPECT_ERROR_CONTAINS(reconcile_world(parse_launcher_env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}),
                                        MpiLayout{0, 2, 0, 2}),
                        "SLURM_PROCID=1 but MPI_COMM_WORLD says this is rank 0 of 2");
}

TEST(ReconcileWorld, LocalRankMismatch) {
  EXPECT_ERROR_CONTAINS(
      reconcile_world(parse_launcher_env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "0"}}),
                      MpiLayout{1, 2, 1, 2}),
      "SLURM_LOCALID=0 but MPI's shared-memory split says this is local rank 1 of 2");
}

TEST(DeviceForRank, CudaBindsTheLocalRanksGpu) {
  // World{rank, size, local_rank, local_size}: two nodes of four ranks; this is rank 6.
  const World world{6, 8, 2, 4, "slurm"};
  EXPECT_EQ(device_for_rank("cuda", world), "cuda:2");  // the local rank, not rank % GPUs
  EXPECT_EQ(device_for_rank("cpu", world), "cpu");
  EXPECT_ERROR_CONTAINS(device_for_rank("cuda:1", world),
                        "run.device: cuda:1 would put all 4 ranks of this node (rank 6 is local rank 2) on one GPU");
  // One rank per node may pin its GPU; a single process keeps whatever it was given.
  EXPECT_EQ(device_for_rank("cuda:1", World{3, 4, 0, 1, "slurm"}), "cuda:1");
  EXPECT_EQ(device_for_rank("cuda", World{}), "cuda");
  EXPECT_EQ(device_for_rank("cuda:3", World{}), "cuda:3");
}

TEST(ProcessEnvironment, SeesVariablesOfThisProcess) {
  ASSERT_EQ(setenv("DPTRAIN_WORLD_TEST_VARIABLE", "a=b", 1), 0);
  EnvMap env = process_environment();
  unsetenv("DPTRAIN_WORLD_TEST_VARIABLE");
  ASSERT_TRUE(env.count("DPTRAIN_WORLD_TEST_VARIABLE"));
  EXPECT_EQ(env["DPTRAIN_WORLD_TEST_VARIABLE"], "a=b");  // split at the first '='
}

}  // namespace
}  // namespace dp
