// The training loop for one process: builds model, data, optimiser and schedule from a Config,
// trains with per-phase timing, evaluates each epoch without building graphs, and reports to the
// console and the metrics log.
#pragma once

#include <cstdint>
#include <vector>

#include "launch/config.h"
#include "launch/console.h"
#include "launch/metrics_log.h"
#include "runtime/core/runtime.h"

namespace dp {

struct EpochReport {
  int64_t epoch = 0;  // 1-based
  double train_loss = 0;
  double train_seconds = 0;
  double samples_per_second = 0;
  double test_loss = 0;      // NaN when not evaluated
  double test_accuracy = 0;  // fraction; NaN when not evaluated
};

struct TrainReport {
  std::vector<EpochReport> epochs;
  int64_t steps = 0;
  double peak_rss_mib = 0;
};

// Runs config's recipe on `runtime`; `metrics` may be null. Throws dp::Error on bad input.
TrainReport train(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics);

// output_dir/metrics_file; an existing file there is kept under a timestamped name first.
std::string prepare_metrics_path(const Config& config);

// Peak resident set size of this process so far, in MiB.
double peak_rss_mib();

}  // namespace dp
