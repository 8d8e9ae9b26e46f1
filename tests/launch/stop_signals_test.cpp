// StopSignals in one process (NOTE [ Signals on one thread ], launch/stop_signals.h): the threads
// started after it never take a stop signal, the waiting thread records the first, the second of
// a kind kills, an ignored one stays ignored, and the destructor puts everything back. The
// end-to-end runs (exit status, end record, every rank stopping together) are in
// dptrain_robustness_test.cpp and dptrain_distributed_test.cpp.
#include <gtest/gtest.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "launch/stop_signals.h"
#include "runtime/core/error.h"

namespace {

// Waits up to 10 s for `signals` to report something.
int wait_received(const dp::StopSignals& signals) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (signals.received() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return signals.received();
}

bool blocked_here(int signal) {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, signal) == 1;
}

TEST(StopSignals, ThreadsStartedAfterItNeverTakeTheSignalsAndTheFirstIsRecorded) {
  {
    const dp::StopSignals signals;
    bool blocked_in_worker[3] = {};
    std::thread worker([&] {
      blocked_in_worker[0] = blocked_here(SIGTERM);
      blocked_in_worker[1] = blocked_here(SIGINT);
      blocked_in_worker[2] = blocked_here(SIGUSR1);
    });
    worker.join();
    EXPECT_TRUE(blocked_in_worker[0] && blocked_in_worker[1] && blocked_in_worker[2]);
    EXPECT_TRUE(blocked_here(SIGTERM));
    EXPECT_EQ(signals.received(), 0);
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    EXPECT_EQ(wait_received(signals), SIGUSR1);
    // A different kind later is taken too (this process survives it) but the first one is reported.
    ASSERT_EQ(kill(getpid(), SIGTERM), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(signals.received(), SIGUSR1);
  }
  // Destroyed: this thread's mask and the default dispositions are back.
  EXPECT_FALSE(blocked_here(SIGTERM));
  EXPECT_FALSE(blocked_here(SIGUSR1));
  struct sigaction action {};
  sigaction(SIGTERM, nullptr, &action);
  EXPECT_EQ(action.sa_handler, SIG_DFL);
  // And a new one starts from nothing received.
  const dp::StopSignals again;
  EXPECT_EQ(again.received(), 0);
}

TEST(StopSignals, OnlyOneAtATime) {
  const dp::StopSignals signals;
  EXPECT_THROW({ const dp::StopSignals second; }, dp::Error);
}

TEST(StopSignalsDeathTest, TheSecondSignalOfAKindKillsTheProcess) {
  EXPECT_EXIT(
      {
        const dp::StopSignals signals;
        kill(getpid(), SIGTERM);
        if (wait_received(signals) != SIGTERM) _exit(3);
        kill(getpid(), SIGTERM);
        std::this_thread::sleep_for(std::chrono::seconds(10));
        _exit(4);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

TEST(StopSignals, ASignalIgnoredOnEntryStaysIgnored) {
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &ignore, &previous), 0);
  {
    const dp::StopSignals signals;
    EXPECT_FALSE(blocked_here(SIGUSR1));
    ASSERT_EQ(kill(getpid(), SIGUSR1), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(signals.received(), 0);
  }
  struct sigaction now {};
  sigaction(SIGUSR1, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
  sigaction(SIGUSR1, &previous, nullptr);
}

}  // namespace
