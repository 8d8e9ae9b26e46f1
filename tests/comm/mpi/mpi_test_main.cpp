// main() of comm_mpi_tests, which mpirun starts on every rank (tests/comm/CMakeLists.txt).
// Every rank runs every test in the same order, so each test's collectives match across ranks.
// Rank 0 prints the usual GoogleTest output; other ranks print only their failures, prefixed with
// their rank, so a failure on any rank is visible (and fails mpirun's exit status).
#include <gtest/gtest.h>

#include "comm/mpi/mpi_environment.h"
#include "common/mpi_rank_output.h"
#include "mpi_test_environment.h"

namespace dp::testing {
namespace {

MpiEnvironment* the_test_mpi = nullptr;
}  // namespace

MpiEnvironment& test_mpi() { return *the_test_mpi; }

}  // namespace dp::testing

int main(int argc, char** argv) {
  dp::MpiEnvironment mpi(&argc, &argv);
  dp::testing::the_test_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  dp::testing::print_only_failures_off_rank_zero(mpi.layout().rank);
  return RUN_ALL_TESTS();
}
