// The training loop for one process: builds model, data, optimiser and schedule from a Config,
// trains with per-phase timing, evaluates each epoch without building graphs, and reports to the
// console and the metrics log.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "launch/config.h"
#include "launch/console.h"
#include "launch/metrics_log.h"
#include "launch/stop_signals.h"
#include "launch/training_run.h"
#include "comm/process_group.h"
#include "runtime/core/runtime.h"

namespace dp {

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0;
  bool train_loss_known = true;  // false: resumed at the epoch's end from a checkpoint without its loss
  double train_seconds = 0;
  double samples_per_second = 0;  // NaN when no step ran (resumed at the epoch's end)
  int64_t steps_run = 0;     // steps this process ran in the epoch (fewer than the epoch's when resumed)
  double test_loss = 0;      // NaN when not evaluated
  double test_accuracy = 0;  // fraction; NaN when not evaluated
  double test_accuracy_top5 = std::numeric_limits<double>::quiet_NaN();  // NaN: not counted (NOTE [ Top-5 accuracy ])
};

struct CommReport {  // averages over the synchronised steps of a distributed run
  double comm_ms = 0, exposed_ms = 0;  // per step
  double hidden_fraction = 0;          // 1 − exposed / comm over the whole run
  int most_often_last_bucket = -1;     // the bucket that most often finished last
  int buckets = 0;
};

struct TrainReport {
  std::vector<EpochReport> epochs;
  int64_t steps = 0;
  // Samples (sequences for text) trained over all ranks since the run began, a resumed run's
  // included; -1 when resumed from a checkpoint that did not count them.
  int64_t samples = 0;
  int64_t skipped_steps = 0;  // optimiser steps skipped for a gradient overflow
  int64_t graph_captures = 0, graph_replays = 0;  // run.cuda_graphs (NOTE [ CUDA graphs ])
  bool reached_target = false;  // an evaluation reached run.target_accuracy (the run then stopped)
  int stop_signal = 0;  // the signal that stopped the run early (SIGTERM, SIGINT, SIGUSR1), or 0
  double peak_rss_mib = 0;
  CommReport comm;  // zeros when not distributed
  // FNV-1a over every parameter's and buffer's name and bytes at the end: equal digests, equal
  // models (to compare runs, e.g. with run.deterministic).
  uint64_t model_digest = 0;
  std::string weights_path;  // run.weights_file as written (rank 0); empty: none
  int64_t weights_bytes = 0;
  double weights_seconds = 0;  // writing it: fsynced and renamed into place
};

// Runs config's recipe on `runtime`; `metrics` may be null. With a `world.group` of more than
// one rank the run is data-parallel (NOTE [ Distributed runs ] in trainer.cpp); every rank calls
// train(). `world.group` takes CPU tensors (MPI); a GPU run's gradients, weights and buffers go
// through `world.device_group` (NCCL over the same ranks), required when the device is a GPU and
// the world has more than one rank; distributed.sync_batchnorm needs `world.batch_norm_group`.
// With `stop_signals`, a SIGTERM/SIGINT ends the run after the step in progress (NOTE [ Stopping
// on a signal ] in launch/stop_signals.h; report.stop_signal says so).
// Throws dp::Error on bad input and on divergence (NOTE [ Divergence checks ] in trainer.cpp);
// the metrics log then ends with an `end` record whose reason is "error".
TrainReport train(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics,
                  const RunWorld& world = {}, const StopSignals* stop_signals = nullptr);

// Checks that every rank of `group` resolved the same configuration (one all-gather of a hash);
// a dp::Error naming the ranks that differ from rank 0 otherwise.
void check_same_config_on_every_rank(const Config& config, ProcessGroup& group, Device cpu);

// output_dir/metrics_file (MetricsLog keeps a file already there under another name).
std::string metrics_path(const Config& config);

// Peak resident set size of this process so far, in MiB.
double peak_rss_mib();

}  // namespace dp
