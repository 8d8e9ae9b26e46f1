// Command line of the dptrain program.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launch/evaluate_command.h"
#include "launch/prepare_text.h"
#include "launch/scaling_report.h"

namespace dp {

// `dptrain check-mllog FILE --benchmark resnet|bert`: checks an MLLOG file against the MLPerf
// rules (launch/mllog_checker.h) and exits; no config is loaded and MPI is not started.
struct CheckMllogArgs {
  std::string path;
  std::string benchmark;
};

struct CliArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // "section.key=value"; --resume X adds run.resume=X last
  bool print_config = false;           // print the resolved config and exit
  std::optional<CheckMllogArgs> check_mllog;  // set: run the check instead of training
  std::optional<PrepareTextArgs> prepare_text;  // set: make text shards instead of training
  std::optional<ScalingReportArgs> scaling_report;  // set: compare runs' metrics instead of training
  // set: evaluate weights with the recipe instead of training (launch/evaluate_command.h)
  std::optional<EvaluateArgs> evaluate;
};

// Parses argv. Returns the arguments, or the exit code when the program should stop now
// (--help/--version: 0, after printing; a usage error: non-zero, after printing the message; a
// usage error of check-mllog: 2, its documented status).
// `dptrain prepare-text [FILE ...] --out DIR [--vocab vocab.txt] ...`: launch/prepare_text.h.
// `dptrain evaluate --config RECIPE [--set ...] (--weights FILE | --checkpoint DIR|auto) [--json]`:
// launch/evaluate_command.h (--config and --set may come before or after `evaluate`).
std::variant<CliArgs, int> parse_cli(int argc, const char* const* argv);

}  // namespace dp
