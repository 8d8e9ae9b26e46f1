// The NCCL tests' MPI and GPU: created by main() (nccl_test_main.cpp) for the whole run. Tests
// create their own process groups on the GPU numbered by their local rank.
#pragma once

#include <string>

#include "comm/mpi/mpi_environment.h"

namespace dp::testing {

MpiEnvironment& test_mpi();

// Why every GPU test skips on every rank ("" when they run): no GPU, or fewer GPUs on a node than
// ranks on it (NCCL needs a GPU of its own for each rank). Decided by all ranks together, so
// that no rank runs a collective that another skips.
const std::string& nccl_skip_reason();

}  // namespace dp::testing
