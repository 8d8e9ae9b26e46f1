// main() of comm_mpi_tests, which mpirun starts on every rank (tests/comm/CMakeLists.txt).
// Every rank runs every test in the same order, so each test's collectives match across ranks.
// Rank 0 prints the usual GoogleTest output; other ranks print only their failures, prefixed with
// their rank, so a failure on any rank is visible (and fails mpirun's exit status).
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi/mpi_environment.h"
#include "mpi_test_environment.h"

namespace dp::testing {
namespace {

MpiEnvironment* the_test_mpi = nullptr;

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

}  // namespace

MpiEnvironment& test_mpi() { return *the_test_mpi; }

}  // namespace dp::testing

int main(int argc, char** argv) {
  dp::MpiEnvironment mpi(&argc, &argv);
  dp::testing::the_test_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.layout().rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new dp::testing::RankFailurePrinter(mpi.layout().rank));
  }
  return RUN_ALL_TESTS();
}
