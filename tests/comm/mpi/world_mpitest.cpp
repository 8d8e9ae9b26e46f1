// World discovery against a live MPI started by mpirun: Open MPI's variables agree with
// MPI_COMM_WORLD, the local rank comes from the shared-memory split (one node here), and a
// launcher claiming a different size is refused.
#include <gtest/gtest.h>

#include "comm/mpi/mpi_environment.h"
#include "comm/world.h"
#include "common/expect_error.h"
#include "mpi_test_environment.h"

namespace dp {
namespace {

TEST(WorldUnderMpirun, AgreesWithMpi) {
  const MpiLayout& mpi = testing::test_mpi().layout();
  World world = discover_world(testing::test_mpi(), process_environment());
  EXPECT_EQ(world.launcher, "openmpi");
  EXPECT_EQ(world.rank, mpi.rank);
  EXPECT_EQ(world.size, mpi.size);
  // mpirun here starts every rank on this one machine.
  EXPECT_EQ(world.local_rank, mpi.rank);
  EXPECT_EQ(world.local_size, mpi.size);
  EXPECT_EQ(mpi.nodes, 1);
  EXPECT_EQ(world.nodes, 1);
}

TEST(WorldUnderMpirun, LauncherClaimingAnotherSizeIsRefused) {
  const MpiLayout& mpi = testing::test_mpi().layout();
  EnvMap env = process_environment();
  env["OMPI_COMM_WORLD_SIZE"] = std::to_string(mpi.size + 1);
  EXPECT_ERROR_CONTAINS(discover_world(testing::test_mpi(), env),
                        "mpirun started " + std::to_string(mpi.size + 1) + " ranks");
}

}  // namespace
}  // namespace dp
