// comm_fault_program: a training-like loop of all-reduces in which one rank misbehaves, run under
// mpirun by run_fault_case.cmake, which checks that the job ends non-zero, in time, with a message
// naming the culprit. Not a gtest: the job is meant to die.
//
//   comm_fault_program <scenario> <watchdog timeout in ms> [victim rank]
//   kill    the victim SIGKILLs itself at iteration kVictimIteration (the others wait for it)
//   stall   the victim stops issuing collectives (sleeps) at that iteration
//   desync  at that iteration the victim broadcasts while the others all-reduce
//   slow_save  at that iteration every rank enters the barrier after a checkpoint write
//           (kCheckpointWaitTag), the victim after "writing" (sleeping) far too long; the timeout
//           given is then the checkpoint wait's, the collectives' own is a minute
// Every rank prints its progress to stdout; errors go to stderr and exit 1.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_process_group.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace {

constexpr int kVictimIteration = 5;
constexpr int kMaxIterations = 1000;  // far more than the victim lets the others complete

int usage() {
  std::fprintf(stderr, "usage: comm_fault_program kill|stall|desync|slow_save <watchdog timeout ms> [victim rank]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string scenario = argv[1];
  if (scenario != "kill" && scenario != "stall" && scenario != "desync" && scenario != "slow_save") return usage();
  const auto timeout = std::chrono::milliseconds(std::atoll(argv[2]));
  const int victim = argc > 3 ? std::atoi(argv[3]) : scenario == "slow_save" ? 0 : 1;  // rank 0 writes checkpoints

  dp::MpiEnvironment mpi(&argc, &argv);
  const int rank = mpi.layout().rank;
  try {
    dp::Runtime runtime;
    const bool slow_save = scenario == "slow_save";
    dp::MpiProcessGroup group(mpi, {.check_agreement = true,
                                    .watchdog_timeout = slow_save ? std::chrono::milliseconds(60000) : timeout,
                                    .checkpoint_wait_timeout = timeout});
    if (rank == 0) {
      std::printf("comm_fault_program: %s, %d ranks, victim rank %d, watchdog timeout %lld ms\n",
                  scenario.c_str(), group.size(), victim, static_cast<long long>(timeout.count()));
    }
    dp::Tensor gradient = dp::full({1024}, 1.0, dp::kFloat32, runtime.cpu());
    for (int iteration = 0; iteration < kMaxIterations; ++iteration) {
      if (slow_save && iteration == kVictimIteration) {
        if (rank == victim) std::this_thread::sleep_for(std::chrono::seconds(120));
        group.barrier(dp::kCheckpointWaitTag)->wait();
      }
      if (rank == victim && iteration == kVictimIteration && !slow_save) {
        std::printf("rank %d: %s at iteration %d\n", rank, scenario.c_str(), iteration);
        std::fflush(stdout);
        if (scenario == "kill") raise(SIGKILL);
        if (scenario == "stall") std::this_thread::sleep_for(std::chrono::seconds(120));
        if (scenario == "desync") {
          group.broadcast(gradient, 0)->wait();
          continue;
        }
      }
      group.all_reduce(gradient, dp::CollectiveReduce::Average)->wait();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "compute"
    }
    std::printf("rank %d: finished %d iterations; the fault went unnoticed\n", rank, kMaxIterations);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    return 1;
  }
}
