// GoogleTest output for programs that mpirun starts on every rank (comm_mpi_tests,
// comm_nccl_tests): rank 0 keeps the usual printer; every other rank prints only its failures,
// prefixed with its rank, so a failure on any rank is visible without N copies of the log.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace dp::testing {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

// Call after InitGoogleTest, before RUN_ALL_TESTS.
inline void print_only_failures_off_rank_zero(int rank) {
  if (rank == 0) return;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));
}

}  // namespace dp::testing
