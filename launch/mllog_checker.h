// dptrain's MLPerf compliance checker for `:::MLLOG` logs: the rule sets ResNet 4.0.0 and BERT
// 5.0.0, written from the MLCommons checker's rule files (mlperf_logging/compliance_checker/
// training_4.0.0, training_5.0.0) and the training rules' hyperparameter table. The rules are
// data (mllog_rule_set); check_mllog walks a log once against them. docs/mllog.md lists them.
//
// Like the official checker: lines without `:::MLLOG ` are ignored (text before the marker on a
// line, e.g. an `mpirun --tag-output` prefix, is dropped), keys no rule names are allowed, the
// closed division is checked against the benchmark's hyperparameter rules and the open division
// only against the common ones. Stricter, on purpose: a key required exactly once fails when
// logged twice even with the same value (the official checker only warns), run events after
// run_stop fail, and any eval_accuracy outside [0, 1) fails (a percentage logged by mistake).
//
// Every violation reads `<file>:<line>: <rule id>: <message>`; line 0 means the log as a whole
// (a key that never appears). Rule ids are `<key>.count`, `<key>.value`, `<key>.metadata`,
// `<key>.order`, and `parse`, `init_time`, `after_run_stop`, `result`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launch/mllog.h"

namespace dp {

enum class MlOccurrence {
  kExactlyOne,
  kAtLeastOne,
  kAtLeastOneOr,  // this key or one of KeyRule::alternatives at least once
  kAtMostOne,     // optional; when logged, once
};

// A constraint on a value (a record's, or one metadata entry's).
struct MlValueRule {
  enum class Kind {
    kAny,
    kNonEmpty,          // not the empty string (numbers pass)
    kOneOf,             // a string in `strings`
    kPositive,          // a number > 0
    kEquals,            // a number equal to one of `numbers` (relative tolerance 1e-9; 0 exactly)
    kIntegerAtLeast,    // an integer >= numbers[0] (within 1e-5, as the official is_integer)
    kPowerOfTwoTimes,   // numbers[0] · 2^N for an integer N (log2 within 1e-5)
    kMultipleOf,        // numbers[0] · k for an integer k (within 1e-5)
    kFraction,          // 0 <= v < 1
    kEqualsBelowBatch,  // equal to numbers[0] while global_batch_size < numbers[1]
  };
  Kind kind = Kind::kAny;
  std::vector<std::string_view> strings{};
  std::vector<double> numbers{};
};

// Rule tables use designated initializers that leave members out: every member has an
// initializer, or gcc 12 warns (-Wmissing-field-initializers).
struct MlKeyRule {
  std::string_view key{};
  MlOccurrence occurrence = MlOccurrence::kExactlyOne;
  std::vector<std::string_view> alternatives{};  // kAtLeastOneOr
  MlValueRule value{};
  // Metadata the record must carry: every name of at least one group (empty: none needed).
  std::vector<std::vector<std::string_view>> metadata{};
  // Constraints on metadata entries, checked when the entry is present.
  std::vector<std::pair<std::string_view, MlValueRule>> metadata_values{};
  std::vector<std::string_view> after{};      // keys that must have been logged before this record
  std::vector<std::string_view> not_after{};  // keys that must not have been logged before it
};

// One benchmark's rules. Tables are applied in order, a later rule for a key replacing an
// earlier one (closed_resnet.yaml's eval_accuracy replaces common.yaml's, as in the official).
struct MlRuleSet {
  MlBenchmark benchmark = MlBenchmark::kResnet;
  std::string_view version;        // "4.0.0"
  std::vector<MlKeyRule> common;   // both divisions
  std::vector<MlKeyRule> closed;   // closed division only
  // Closed: the value of `branch_key` picks one more table (ResNet: opt_name lars | sgd).
  std::string_view branch_key;
  std::vector<std::pair<std::string_view, std::vector<MlKeyRule>>> branches;
  double closed_target = 0.0;      // closed: some eval_accuracy in [target, 1) before run_stop
  double closed_init_minutes = 30;  // init_stop − the first init_start must be below this
  double open_init_minutes = 240;
};

MlRuleSet mllog_rule_set(MlBenchmark benchmark);

struct MlViolation {
  std::string file;
  int64_t line = 0;  // 1-based line of the log; 0: the log as a whole
  std::string rule;
  std::string message;
  std::string str() const;  // "<file>:<line>: <rule>: <message>"
};

struct MlCheckReport {
  std::string file;
  MlBenchmark benchmark = MlBenchmark::kResnet;
  std::string version;
  std::string division;     // as logged ("closed" when missing or invalid: the stricter rules)
  int64_t records = 0;      // :::MLLOG lines read
  std::vector<MlViolation> violations;
  bool compliant() const { return violations.empty(); }
  // Whether some violation has this rule id.
  bool has(std::string_view rule) const;
};

// Checks the text of a log; `file` names it in the violations.
MlCheckReport check_mllog(std::string_view text, const std::string& file, MlBenchmark benchmark);
// Reads and checks a file; an unreadable file is a dp::Error.
MlCheckReport check_mllog_file(const std::string& path, MlBenchmark benchmark);

// `dptrain check-mllog FILE --benchmark NAME`: prints each violation and a summary line to
// `out` and returns the exit status: 0 compliant, 1 not compliant, 2 unreadable file (the
// message goes to `err`).
int run_check_mllog(const std::string& path, MlBenchmark benchmark, std::FILE* out, std::FILE* err);

}  // namespace dp
