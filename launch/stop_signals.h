// SIGTERM, SIGINT and SIGUSR1 (Slurm's `--signal=USR1@<seconds>` warning before a time limit)
// end a run cleanly: the step in progress finishes, a checkpoint is written (NOTE [ Resuming a
// run ] in launch/run_checkpoint.h), the metrics file gets its `end` record naming the signal,
// and dptrain exits with 128 + the signal number (143, 130, 138: the status a shell or Slurm
// reports for a process the signal killed, so a job script can test it and requeue).
//
// NOTE [ Stopping on a signal ]
// The signal is only recorded; the training loop polls it once per step. A second signal of the
// same kind is not caught: a user who presses Ctrl-C twice, or a launcher that escalates, still
// kills the process at once.
// In a data-parallel run every rank must stop after the same step, or the others wait in a
// collective that never comes. Slurm signals every task, but not at the same instant, and a
// user may signal one rank; so the ranks agree: each step, every rank contributes its "stop
// requested" flags to one small all-reduce over the CPU process group that is waited for one
// step later (it runs behind that step's gradient all-reduces and costs the step nothing). All
// ranks see the same sum after the same step and stop there together.
//
// NOTE [ Signals on one thread ]
// The signals are blocked in the thread that creates StopSignals, so every thread started after
// it — MPI's, the OpenMP pool computing GEMMs, the data loaders — inherits the block, and one
// waiting thread takes them (from a signalfd). No signal frame is ever pushed onto a computing
// thread: oneDNN's sgemm runs its kernels on a small stack of its own on the heap, and a frame
// with several KB of AVX-512 state written below it corrupted the heap (glibc's "corrupted size
// vs. prev_size" in 2 of 25 two-rank runs signalled with SIGTERM; NOTE [ CPU float32 GEMM on
// oneDNN ] in runtime/backend/cpu/gemm.cpp). So create it first, before MPI and any computing
// thread. A recording handler stays installed as well, for a thread some library started
// earlier with the signals unblocked.
//
// A signal that was ignored when dptrain started (nohup, a shell's background job) stays ignored.
//
// Signal dispositions are process-wide, so one StopSignals object may exist at a time (it
// restores the previous handlers and the creating thread's mask when destroyed); this is the one
// piece of process-global state in dptrain, forced by the signal API.
#pragma once

#include <signal.h>

#include <thread>

namespace dp {

class StopSignals {
 public:
  // Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread (and so in the threads it starts
  // from now on) and starts the thread that waits for them.
  StopSignals();
  // Stops that thread and restores the previous handlers and mask.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGTERM, SIGINT or SIGUSR1), or 0.
  int received() const;
  // "SIGTERM" / "SIGINT" / "SIGUSR1" / ...
  static const char* name(int signal);

 private:
  void wait_for_signals(sigset_t waited);

  sigset_t previous_mask_;
  int signal_fd_ = -1;  // the blocked signals, read by the waiting thread
  int wake_fd_ = -1;    // an eventfd the destructor writes to end that thread
  std::thread waiter_;
};

}  // namespace dp
