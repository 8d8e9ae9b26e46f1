// The multi-rank tests' MPI: created by main() (mpi_test_main.cpp) for the whole run, since MPI
// can be initialised only once per process. Tests create their own process groups from it.
#pragma once

#include "comm/mpi/mpi_environment.h"

namespace dp::testing {

MpiEnvironment& test_mpi();

}  // namespace dp::testing
