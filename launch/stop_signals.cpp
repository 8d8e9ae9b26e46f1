#include "launch/stop_signals.h"

#include <signal.h>

#include <atomic>
#include <cstring>

#include "runtime/core/error.h"

namespace dp {
namespace {

// Written by the handler, read by the training loop (lock-free, so async-signal-safe).
std::atomic<int> g_received{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous_term, g_previous_int, g_previous_usr1;

static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void record_stop_signal(int signal) {
  int expected = 0;
  g_received.compare_exchange_strong(expected, signal);
}

void install(int signal, struct sigaction* previous) {
  DP_CHECK(sigaction(signal, nullptr, previous) == 0, "cannot read the disposition of ", StopSignals::name(signal),
           ": ", std::strerror(errno));
  // A signal ignored on entry stays ignored (the convention of nohup and of shells, which start
  // background jobs with SIGINT ignored): whoever started us chose that.
  if (previous->sa_handler == SIG_IGN) return;
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESETHAND: the second signal takes the default action (NOTE [ Stopping on a signal ]).
  // SA_RESTART: reads and waits in progress resume instead of failing with EINTR.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  DP_CHECK(sigaction(signal, &action, nullptr) == 0, "cannot install the handler for ", StopSignals::name(signal),
           ": ", std::strerror(errno));
}

}  // namespace

StopSignals::StopSignals() {
  DP_CHECK(!g_installed.exchange(true), "StopSignals: only one may exist at a time (signal handlers are per process)");
  g_received = 0;
  install(SIGTERM, &g_previous_term);
  install(SIGINT, &g_previous_int);
  install(SIGUSR1, &g_previous_usr1);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  g_installed = false;
}

int StopSignals::received() const { return g_received.load(std::memory_order_relaxed); }

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGKILL: return "SIGKILL";
    default: return "a signal";
  }
}

}  // namespace dp
