// main() of comm_nccl_tests, which mpirun starts on every rank (tests/comm/CMakeLists.txt), as
// comm_mpi_tests' main does: every rank runs every test in the same order; rank 0 prints the usual
// GoogleTest output, other ranks only their failures, prefixed with their rank.
//
// Before any test, the ranks agree on whether they all have a GPU of their own; if one does not,
// every GPU test skips on every rank with the reason, and rank 0 prints it once (ctest reports
// the run as skipped on that line).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_environment.h"
#include "common/mpi_rank_output.h"
#include "nccl_test_environment.h"
#include "runtime/core/runtime.h"

namespace dp::testing {
namespace {

MpiEnvironment* the_test_mpi = nullptr;
std::string the_skip_reason;

// This rank's reason to skip, "" when it has a GPU of its own.
std::string local_skip_reason(const MpiLayout& layout) {
  int gpus = 0;
  try {
    gpus = Runtime::cuda_device_count();
  } catch (const Error& e) {
    return std::string("the CUDA runtime failed: ") + e.what();
  }
  if (gpus == 0) return "no CUDA GPU is visible (no driver or no device); these tests need one per rank";
  if (gpus < layout.local_size) {
    return detail::concat(layout.local_size, " ranks on this node but ", gpus,
                          " GPU(s): NCCL needs a GPU of its own for each rank");
  }
  return "";
}

}  // namespace

MpiEnvironment& test_mpi() { return *the_test_mpi; }
const std::string& nccl_skip_reason() { return the_skip_reason; }

}  // namespace dp::testing

int main(int argc, char** argv) {
  dp::MpiEnvironment mpi(&argc, &argv);
  dp::testing::the_test_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);

  std::string& reason = dp::testing::the_skip_reason;
  reason = dp::testing::local_skip_reason(mpi.layout());
  int ready = reason.empty() ? 1 : 0, all_ready = 0;
  dp::check_mpi(MPI_Allreduce(&ready, &all_ready, 1, MPI_INT, MPI_MIN, mpi.world_comm()), "MPI_Allreduce",
                "comm_nccl_tests: agreeing on whether every rank has a GPU");
  if (ready && !all_ready) reason = "another rank has no GPU of its own, so every rank skips";
  if (mpi.layout().rank == 0 && !reason.empty()) {
    std::printf("comm_nccl_tests: the GPU tests skip: %s\n", reason.c_str());
  }

  dp::testing::print_only_failures_off_rank_zero(mpi.layout().rank);
  return RUN_ALL_TESTS();
}
