// `dptrain scaling-report RUN...`: a scaling study's table from the runs' metrics files.
//
// NOTE [ Scaling report ]
// A scaling study runs one recipe at several sizes (`srun -N 1 ...`, `srun -N 2 ...`, each with
// its own run.output_dir) and asks how throughput grows with the ranks and where each step's time
// goes. Every run already writes what that needs to its metrics file (JSON lines: launch/
// metrics_log.h): the start record (model, device, precision, ranks, nodes, batch), a step record
// every run.log_every steps (the window's samples/s and the epoch's per-phase step time: data,
// forward, backward, exposed communication, optimiser), epoch and evaluation records (accuracy,
// training seconds) and the end record (the communication's total and hidden share). The report
// reads them and puts the runs side by side:
// - Throughput is the median over a run's step records of each window's samples (or sequences)
//   per second, after dropping the first `skip_records` (default 1: the window with the warm-up —
//   first allocations, cuDNN's algorithm search, the loader's first fill). A median over windows,
//   because one slow window (a checkpoint, a neighbour's job) should not move the figure.
// - Speedup = throughput / the baseline's; efficiency = speedup / (ranks / the baseline's ranks):
//   100 % is linear scaling. The baseline is the run with the fewest ranks unless named.
// - Kind: strong scaling when every run has the same global batch (the work per step is split
//   finer), weak when every run has the same batch per rank (the global batch grows); otherwise the
//   figures are still throughput ratios and the report says the batches differ.
// - Step time: each phase's median over the step records' windows past the warm-up records (as
//   the throughput; a file from before dptrain wrote window figures: the last record's epoch
//   averages), and "step ms" =
//   the global batch / throughput, the wall time a step takes, which also holds what no phase
//   covers (logging, the host's own work between phases).
// - Runs that differ in model, precision, device kind or dtype of gradient communication are
//   reported with a warning naming the difference: their ratios compare unlike things.
// A file that cannot be read or is not a dptrain metrics file is an error naming it and the line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dp {

struct ScalingReportArgs {
  std::vector<std::string> runs;  // metrics files, or run folders holding metrics.jsonl
  std::string baseline;           // one of `runs`, as given; empty: the run with the fewest ranks
  std::string format = "table";   // table, markdown, csv, json
  int skip_records = 1;           // step records dropped at the start of each run (warm-up)
};

// One run, as its metrics file tells it.
struct RunSummary {
  std::string label;  // the path as given
  std::string path;   // the metrics file read
  std::string model, device, precision, grad_dtype;
  int64_t ranks = 1;
  std::optional<int64_t> nodes;          // absent in files written before dptrain recorded it
  std::optional<int64_t> global_batch;   // fixed batches: samples (rows) per step over all ranks
  std::optional<int64_t> per_rank_batch;
  std::string unit = "samples";          // "sequences" for text runs
  double throughput = 0;                 // median of the step records' samples (sequences) per second
  double throughput_min = 0, throughput_max = 0;
  int64_t records_used = 0, records_total = 0;
  std::map<std::string, double> phases_ms;  // per phase, the median window past the warm-up (older files: the last record's epoch averages)
  std::optional<double> comm_ms, exposed_ms, hidden_pct;  // the end record's (or last step record's)
  std::optional<double> accuracy;        // the last evaluation's test accuracy, in [0, 1]
  std::optional<double> tokens_per_second;  // text runs: tokens over the epochs' training seconds
  double train_seconds = 0;              // summed over the epoch records
  int64_t epochs = 0, steps = 0;
  std::string end_reason;                // "completed", "max_steps", ..., "error", or "" (no end record)
};

// Reads one run (a metrics file, or a folder holding metrics.jsonl). Throws dp::Error naming the
// file (and the line) when it cannot be read or is not a dptrain metrics file.
RunSummary summarize_run(const std::string& run, int skip_records = 1);

struct ScalingReport {
  std::vector<RunSummary> runs;  // in the order given
  size_t baseline = 0;           // index into runs
  std::vector<double> speedup, efficiency;  // per run
  std::string kind;              // "strong", "weak", "same size" or "mixed"
  bool batches_known = true;     // every run's global and per-rank batch recorded (not token batching)
  std::vector<std::string> warnings;
};

// Throws dp::Error when `baseline` names none of the runs, or the baseline's throughput is zero.
ScalingReport make_scaling_report(std::vector<RunSummary> runs, const std::string& baseline = "");

// The report as text: "table" (aligned columns), "markdown", "csv" or "json".
std::string render_scaling_report(const ScalingReport& report, const std::string& format);

// The subcommand: prints the report to `out`; errors to `err`. Exit status: 0 printed, 2 an input
// could not be read or the arguments do not fit.
int run_scaling_report(const ScalingReportArgs& args, std::FILE* out, std::FILE* err);

}  // namespace dp
