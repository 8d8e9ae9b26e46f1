// SIGTERM, SIGINT and SIGUSR1 (Slurm's `--signal=USR1@<seconds>` warning before a time limit)
// end a run cleanly: the step in progress finishes, a checkpoint is written (NOTE [ Resuming a
// run ] in launch/run_checkpoint.h), the metrics file gets its `end` record naming the signal,
// and dptrain exits with 128 + the signal number (143, 130, 138: the status a shell or Slurm
// reports for a process the signal killed, so a job script can test it and requeue).
//
// NOTE [ Stopping on a signal ]
// The handler only records the signal; the training loop polls it once per step. A second
// signal of the same kind is not caught (SA_RESETHAND): a user who presses Ctrl-C twice, or a
// launcher that escalates, still kills the process at once.
// In a data-parallel run every rank must stop after the same step, or the others wait in a
// collective that never comes. Slurm signals every task, but not at the same instant, and a
// user may signal one rank; so the ranks agree: each step, every rank contributes its "stop
// requested" flags to one small all-reduce over the CPU process group that is waited for one
// step later (it runs behind that step's gradient all-reduces and costs the step nothing). All
// ranks see the same sum after the same step and stop there together.
//
// A signal that was ignored when dptrain started (nohup, a shell's background job) stays ignored.
//
// Signal dispositions are process-wide, so one StopSignals object may exist at a time (it
// restores the previous handlers when destroyed); this is the one piece of process-global state
// in dptrain, forced by the signal API.
#pragma once

namespace dp {

class StopSignals {
 public:
  // Installs the handlers for SIGTERM, SIGINT and SIGUSR1.
  StopSignals();
  // Restores the handlers that were there before.
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal received (SIGTERM, SIGINT or SIGUSR1), or 0.
  int received() const;
  // "SIGTERM" / "SIGINT" / "SIGUSR1" / ...
  static const char* name(int signal);
};

}  // namespace dp
