#include "launch/stop_signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"

namespace dp {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGUSR1};

// Written by the waiting thread or the handler, read by the training loop (lock-free, so
// async-signal-safe).
std::atomic<int> g_received{0};
std::atomic<bool> g_installed{false};
struct sigaction g_previous[3];

static_assert(std::atomic<int>::is_always_lock_free);

void record(int signal) {
  int expected = 0;
  g_received.compare_exchange_strong(expected, signal);
}

extern "C" void record_stop_signal(int signal) { record(signal); }

// Installs the recording handler for `signal` unless it was ignored on entry (the convention of
// nohup and of shells, which start background jobs with SIGINT ignored: whoever started us chose
// that); returns whether it did.
bool install(int signal, struct sigaction* previous) {
  DP_CHECK(sigaction(signal, nullptr, previous) == 0, "cannot read the disposition of ", StopSignals::name(signal),
           ": ", std::strerror(errno));
  if (previous->sa_handler == SIG_IGN) return false;
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESETHAND: the second signal takes the default action (NOTE [ Stopping on a signal ]).
  // SA_RESTART: reads and waits in progress resume instead of failing with EINTR.
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  DP_CHECK(sigaction(signal, &action, nullptr) == 0, "cannot install the handler for ", StopSignals::name(signal),
           ": ", std::strerror(errno));
  return true;
}

}  // namespace

StopSignals::StopSignals() {
  DP_CHECK(!g_installed.exchange(true), "StopSignals: only one may exist at a time (signal handlers are per process)");
  g_received = 0;
  sigset_t waited;
  sigemptyset(&waited);
  for (int i = 0; i < 3; ++i)
    if (install(kStopSignals[i], &g_previous[i])) sigaddset(&waited, kStopSignals[i]);
  // NOTE [ Signals on one thread ]
  const int status = pthread_sigmask(SIG_BLOCK, &waited, &previous_mask_);
  DP_CHECK(status == 0, "cannot block the stop signals: ", std::strerror(status));
  signal_fd_ = signalfd(-1, &waited, SFD_CLOEXEC);
  DP_CHECK(signal_fd_ >= 0, "cannot open a signalfd for the stop signals: ", std::strerror(errno));
  wake_fd_ = eventfd(0, EFD_CLOEXEC);
  DP_CHECK(wake_fd_ >= 0, "cannot open an eventfd: ", std::strerror(errno));
  waiter_ = std::thread([this, waited] { wait_for_signals(waited); });
}

void StopSignals::wait_for_signals(sigset_t waited) {
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents) return;          // the destructor
    signalfd_siginfo info;
    if (read(signal_fd_, &info, sizeof info) != sizeof info) continue;
    const int signal = static_cast<int>(info.ssi_signo);
    record(signal);
    // The second one of this kind takes the default action: restore it and let the signal through
    // to this thread (the computing threads keep it blocked). One already pending acts at once.
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    sigaction(signal, &default_action, nullptr);
    sigdelset(&waited, signal);
    signalfd(signal_fd_, &waited, 0);
    sigset_t just_this;
    sigemptyset(&just_this);
    sigaddset(&just_this, signal);
    pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
  }
}

StopSignals::~StopSignals() {
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof one) != sizeof one) std::abort();  // an eventfd write cannot fail here
  waiter_.join();
  close(wake_fd_);
  close(signal_fd_);
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &g_previous[i], nullptr);
  pthread_sigmask(SIG_SETMASK, &previous_mask_, nullptr);
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
