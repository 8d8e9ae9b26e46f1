#include "launch/mllog_checker.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace dp {

// ---------------------------------------------------------------------------------------------
// The rules. Sources: C = the official checker's YAML (training_4.0.0 / training_5.0.0),
// T = the training rules' hyperparameter table (training_rules.adoc), D = dptrain's own.
// ---------------------------------------------------------------------------------------------
namespace {

using Kind = MlValueRule::Kind;
using Groups = std::vector<std::vector<std::string_view>>;

MlValueRule any_of_strings(std::vector<std::string_view> strings) { return {Kind::kOneOf, std::move(strings), {}}; }
MlValueRule number(Kind kind, std::vector<double> numbers = {}) { return {kind, {}, std::move(numbers)}; }
const MlValueRule kNonEmpty{Kind::kNonEmpty, {}, {}};

MlKeyRule exactly_one(std::string_view key, MlValueRule value = {}) {
  return {.key = key, .occurrence = MlOccurrence::kExactlyOne, .value = std::move(value)};
}

// common.yaml (both versions) and the submission_benchmark rule of {closed,open}_common.yaml.
// 5.0.0 accepts samples_count in place of epoch_num on epoch_start/epoch_stop; 4.0.0 does not.
std::vector<MlKeyRule> common_rules(MlBenchmark benchmark, bool epochs_by_samples) {
  const Groups epoch_or_samples = {{"epoch_num"}, {"samples_count"}};
  const Groups epoch_metadata = epochs_by_samples ? epoch_or_samples : Groups{{"epoch_num"}};
  return {
      exactly_one(mllog::kSubmissionOrg, kNonEmpty),       // C 4.0.0 (5.0.0 moved it to the system JSON)
      exactly_one(mllog::kSubmissionPlatform, kNonEmpty),  // C 4.0.0, likewise
      exactly_one(mllog::kSubmissionDivision, any_of_strings({"closed", "open"})),  // C
      exactly_one(mllog::kSubmissionStatus, any_of_strings({"cloud", "onprem", "preview", "research"})),  // C 4.0.0
      exactly_one(mllog::kSubmissionBenchmark, any_of_strings({mllog_benchmark_name(benchmark)})),         // C
      {.key = mllog::kCacheClear, .occurrence = MlOccurrence::kAtLeastOne},                                // C
      {.key = mllog::kInitStart,  // C
       .occurrence = MlOccurrence::kAtLeastOne,
       .not_after = {mllog::kInitStop, mllog::kRunStart}},
      {.key = mllog::kInitStop,  // C
       .occurrence = MlOccurrence::kExactlyOne,
       .after = {mllog::kInitStart},
       .not_after = {mllog::kRunStart}},
      {.key = mllog::kRunStart, .occurrence = MlOccurrence::kExactlyOne, .after = {mllog::kInitStop}},  // C
      {.key = mllog::kRunStop,  // C; the status values: D
       .occurrence = MlOccurrence::kExactlyOne,
       .metadata = {{"status"}},
       .metadata_values = {{"status", any_of_strings({mllog::kSuccess, mllog::kAborted})}},
       .after = {mllog::kRunStart}},
      {.key = mllog::kBlockStart,  // C
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kEpochStart},
       .metadata = {{"epoch_count", "first_epoch_num"}, {"samples_count"}},
       .metadata_values = {{"epoch_count", number(Kind::kPositive)},
                           {"samples_count", number(Kind::kIntegerAtLeast, {0})}},
       .after = {mllog::kRunStart}},
      {.key = mllog::kBlockStop,  // C
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kEpochStop},
       .metadata = {{"first_epoch_num"}, {"samples_count"}}},
      {.key = mllog::kEpochStart,  // C; the order: D (training data is read after the clock starts)
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kBlockStart},
       .metadata = epoch_metadata,
       .after = {mllog::kRunStart}},
      {.key = mllog::kEpochStop,  // C
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kBlockStop},
       .metadata = epoch_metadata},
      {.key = mllog::kEvalStart,  // C; the order: D
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kBlockStart},
       .metadata = epoch_or_samples,
       .after = {mllog::kRunStart}},
      {.key = mllog::kEvalStop,  // C
       .occurrence = MlOccurrence::kAtLeastOneOr,
       .alternatives = {mllog::kBlockStop},
       .metadata = epoch_or_samples},
      {.key = mllog::kEvalAccuracy,  // C; the value range and the order: D
       .occurrence = MlOccurrence::kAtLeastOne,
       .value = number(Kind::kFraction),
       .metadata = epoch_or_samples,
       .after = {mllog::kRunStart}},
      exactly_one(mllog::kTrainSamples, kNonEmpty),  // C
      exactly_one(mllog::kEvalSamples, kNonEmpty),   // C
      exactly_one(mllog::kSeed),                     // D (MLPERF.md: the seed is logged)
  };
}

// closed_common.yaml.
std::vector<MlKeyRule> closed_common_rules() {
  return {exactly_one(mllog::kGradientAccumulationSteps, number(Kind::kPositive))};  // C
}

// Closed eval_accuracy: closed_resnet.yaml and closed_bert.yaml ask for epoch_num.
MlKeyRule closed_eval_accuracy() {
  return {.key = mllog::kEvalAccuracy,
          .occurrence = MlOccurrence::kAtLeastOne,
          .value = number(Kind::kFraction),
          .metadata = {{"epoch_num"}},
          .after = {mllog::kRunStart}};
}

MlRuleSet resnet_4_0_0() {
  MlRuleSet r;
  r.benchmark = MlBenchmark::kResnet;
  r.version = "4.0.0";
  r.common = common_rules(MlBenchmark::kResnet, /*epochs_by_samples=*/false);
  r.closed = closed_common_rules();
  r.closed.push_back(exactly_one(mllog::kGlobalBatchSize, number(Kind::kPositive)));  // C
  r.closed.push_back(exactly_one(mllog::kOptName, any_of_strings({"sgd", "lars"})));  // C
  r.closed.push_back(closed_eval_accuracy());                                          // C
  // T: "label smoothing 0 or 0.1"; the rules name no log key, so dptrain logs its own, and a
  // log without it passes.
  r.closed.push_back({.key = "label_smoothing",
                      .occurrence = MlOccurrence::kAtMostOne,
                      .value = number(Kind::kEquals, {0.0, 0.1})});
  r.branch_key = mllog::kOptName;
  const MlValueRule wd = number(Kind::kPowerOfTwoTimes, {1e-4});
  const MlValueRule whole = number(Kind::kIntegerAtLeast, {0});
  r.branches.push_back({"lars",
                        {
                            exactly_one("lars_opt_base_learning_rate"),                                   // C
                            exactly_one("lars_opt_end_learning_rate", number(Kind::kEquals, {1e-4})),     // C
                            exactly_one("lars_opt_learning_rate_decay_poly_power", number(Kind::kEquals, {2})),  // C
                            exactly_one("lars_opt_learning_rate_decay_steps"),                            // C
                            exactly_one("lars_epsilon", number(Kind::kEquals, {0})),                      // C
                            exactly_one("lars_opt_learning_rate_warmup_epochs"),                          // C
                            // C requires it; T: 0.9 below a global batch of 32k.
                            exactly_one("lars_opt_momentum", number(Kind::kEqualsBelowBatch, {0.9, 32768})),
                            exactly_one("lars_opt_weight_decay", wd),  // C
                        }});
  r.branches.push_back({"sgd",
                        {
                            exactly_one("sgd_opt_base_learning_rate", number(Kind::kMultipleOf, {0.001})),  // C
                            exactly_one("sgd_opt_end_learning_rate", number(Kind::kEquals, {1e-4})),        // C
                            exactly_one("sgd_opt_learning_rate_decay_poly_power", number(Kind::kEquals, {2})),  // C, T
                            exactly_one("sgd_opt_learning_rate_decay_steps", whole),  // C, T
                            exactly_one("sgd_opt_weight_decay", wd),                                        // C
                            exactly_one("sgd_opt_momentum", number(Kind::kEquals, {0.9})),                  // C, T
                            exactly_one("model_bn_span"),                                                   // C
                            exactly_one("opt_learning_rate_warmup_epochs", whole),  // C, T
                        }});
  r.closed_target = 0.759;
  return r;
}

MlRuleSet bert_5_0_0() {
  MlRuleSet r;
  r.benchmark = MlBenchmark::kBert;
  r.version = "5.0.0";
  r.common = common_rules(MlBenchmark::kBert, /*epochs_by_samples=*/true);
  r.closed = closed_common_rules();
  for (std::string_view key : {"global_batch_size", "opt_base_learning_rate", "opt_lamb_epsilon",
                               "opt_learning_rate_training_steps", "opt_learning_rate_warmup_steps", "num_warmup_steps",
                               "start_warmup_step", "opt_lamb_beta_1", "opt_lamb_beta_2", "opt_lamb_weight_decay_rate"})
    r.closed.push_back(exactly_one(key));  // C
  r.closed.push_back(closed_eval_accuracy());  // C
  r.closed_target = 0.720;
  return r;
}

}  // namespace

MlRuleSet mllog_rule_set(MlBenchmark benchmark) {
  switch (benchmark) {
    case MlBenchmark::kResnet: return resnet_4_0_0();
    case MlBenchmark::kBert: return bert_5_0_0();
  }
  throw Error("mllog checker: unknown benchmark");
}

// ---------------------------------------------------------------------------------------------
// The check.
// ---------------------------------------------------------------------------------------------
namespace {

using Json = nlohmann::json;

constexpr std::string_view kToken = ":::MLLOG ";

struct Record {
  int64_t line = 0;
  double time_ms = 0;
  std::string key;
  Json value;
  Json metadata;
};

// The official is_integer: within 1e-5 of an integer.
bool is_integer(double v) { return std::isfinite(v) && std::abs(std::round(v) - v) < 1e-5; }

// Relative only: the rules' == 0 (lars_epsilon) stays exact.
bool near(double v, double x) { return std::abs(v - x) <= 1e-9 * std::abs(x); }

std::string join(const std::vector<std::string_view>& names, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += separator;
    out += names[i];
  }
  return out;
}

std::string format_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Why `v` breaks `rule`, or nothing when it does not. `global_batch` is the logged
// global_batch_size, if any.
std::optional<std::string> value_problem(const MlValueRule& rule, const Json& v, std::optional<double> global_batch) {
  switch (rule.kind) {
    case Kind::kAny: return std::nullopt;
    case Kind::kNonEmpty:
      if (v.is_string() && v.get<std::string>().empty()) return "expected a non-empty value";
      return std::nullopt;
    case Kind::kOneOf:
      if (v.is_string() &&
          std::find(rule.strings.begin(), rule.strings.end(), v.get<std::string>()) != rule.strings.end())
        return std::nullopt;
      return "expected one of: " + join(rule.strings, ", ");
    default: break;
  }
  if (!v.is_number()) return "expected a number";
  const double x = v.get<double>();
  const std::vector<double>& n = rule.numbers;
  switch (rule.kind) {
    case Kind::kPositive:
      if (x > 0) return std::nullopt;
      return "expected a number > 0";
    case Kind::kEquals: {
      if (std::any_of(n.begin(), n.end(), [&](double e) { return near(x, e); })) return std::nullopt;
      std::vector<std::string> texts;
      for (double e : n) texts.push_back(format_number(e));
      std::string expected;
      for (size_t i = 0; i < texts.size(); ++i) expected += (i ? " or " : "") + texts[i];
      return "expected " + expected;
    }
    case Kind::kIntegerAtLeast:
      if (is_integer(x) && x >= n[0] - 1e-5) return std::nullopt;
      return "expected an integer >= " + format_number(n[0]);
    case Kind::kPowerOfTwoTimes:
      if (x > 0 && is_integer(std::log2(x / n[0]))) return std::nullopt;
      return "expected " + format_number(n[0]) + " * 2^N for an integer N";
    case Kind::kMultipleOf:
      if (is_integer(x / n[0])) return std::nullopt;
      return "expected a multiple of " + format_number(n[0]);
    case Kind::kFraction:
      if (x >= 0 && x < 1) return std::nullopt;
      return "expected a fraction in [0, 1)";
    case Kind::kEqualsBelowBatch:
      if (!global_batch || *global_batch >= n[1] || near(x, n[0])) return std::nullopt;
      return "expected " + format_number(n[0]) + " with a global batch below " + format_number(n[1]) +
             " (global_batch_size " + format_number(*global_batch) + ")";
    default: return std::nullopt;
  }
}

class Checker {
 public:
  Checker(const std::string& file, MlBenchmark benchmark) : rules_(mllog_rule_set(benchmark)) {
    report_.file = file;
    report_.benchmark = benchmark;
    report_.version = std::string(rules_.version);
    report_.division = "closed";
  }

  MlCheckReport run(std::string_view text) {
    parse(text);
    // Not a log at all (the wrong file?): one message instead of every key missing.
    if (report_.records == 0) {
      violation(0, "parse", "no ':::MLLOG ' lines");
      return std::move(report_);
    }
    select_rules();
    for (const Record& r : records_) check_record(r);
    check_counts();
    if (report_.division == "closed") check_result();
    // Line order, the whole-log ones (line 0) last.
    std::stable_sort(report_.violations.begin(), report_.violations.end(),
                     [](const MlViolation& a, const MlViolation& b) {
                       return (a.line == 0 ? INT64_MAX : a.line) < (b.line == 0 ? INT64_MAX : b.line);
                     });
    return std::move(report_);
  }

 private:
  void violation(int64_t line, std::string rule, std::string message) {
    report_.violations.push_back({report_.file, line, std::move(rule), std::move(message)});
  }

  void parse(std::string_view text) {
    int64_t line_no = 0;
    size_t begin = 0;
    while (begin < text.size()) {
      size_t end = text.find('\n', begin);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(begin, end - begin);
      begin = end + 1;
      ++line_no;
      // As the official parser: whatever precedes the last marker on the line is dropped.
      const size_t at = line.rfind(kToken);
      if (at == std::string_view::npos) continue;
      ++report_.records;
      parse_record(line.substr(at + kToken.size()), line_no);
    }
  }

  void parse_record(std::string_view body, int64_t line_no) {
    Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return violation(line_no, "parse", "malformed JSON after ':::MLLOG '");
    if (!j.is_object()) return violation(line_no, "parse", "expected a JSON object after ':::MLLOG '");
    auto missing = [&](const char* field) {
      violation(line_no, "parse", std::string("record lacks \"") + field + "\"");
    };
    if (!j.contains("time_ms")) return missing("time_ms");
    if (!j.contains("key")) return missing("key");
    if (!j.contains("value")) return missing("value");
    if (!j.contains("metadata")) return missing("metadata");
    if (!j.contains("event_type")) return missing("event_type");
    if (!j["time_ms"].is_number()) return violation(line_no, "parse", "\"time_ms\" is not a number");
    if (!j["key"].is_string()) return violation(line_no, "parse", "\"key\" is not a string");
    if (!j["metadata"].is_object()) return violation(line_no, "parse", "\"metadata\" is not an object");
    const Json& type = j["event_type"];
    if (!type.is_string() || (type != "POINT_IN_TIME" && type != "INTERVAL_START" && type != "INTERVAL_END"))
      return violation(line_no, "parse",
                       "\"event_type\" " + type.dump() + ": expected POINT_IN_TIME, INTERVAL_START or INTERVAL_END");
    records_.push_back({line_no, j["time_ms"].get<double>(), j["key"].get<std::string>(), std::move(j["value"]),
                        std::move(j["metadata"])});
  }

  const Record* first(std::string_view key) const {
    for (const Record& r : records_)
      if (r.key == key) return &r;
    return nullptr;
  }

  // The division and the ResNet optimiser decide which tables apply; a later table's rule for a
  // key replaces an earlier one's.
  void select_rules() {
    const Record* division = first(mllog::kSubmissionDivision);
    const bool open = division && division->value == "open";
    report_.division = open ? "open" : "closed";
    add_rules(rules_.common);
    if (!open) {
      add_rules(rules_.closed);
      if (const Record* branch = !rules_.branch_key.empty() ? first(rules_.branch_key) : nullptr) {
        for (const auto& [value, table] : rules_.branches)
          if (branch->value.is_string() && branch->value.get<std::string>() == value) add_rules(table);
      }
    }
    if (const Record* batch = first(mllog::kGlobalBatchSize); batch && batch->value.is_number())
      global_batch_ = batch->value.get<double>();
  }

  void add_rules(const std::vector<MlKeyRule>& table) {
    for (const MlKeyRule& rule : table) {
      const auto [it, inserted] = index_.try_emplace(std::string(rule.key), active_.size());
      if (inserted)
        active_.push_back(rule);
      else
        active_[it->second] = rule;
    }
  }

  const MlKeyRule* rule_for(const std::string& key) const {
    const auto it = index_.find(key);
    return it == index_.end() ? nullptr : &active_[it->second];
  }

  void check_record(const Record& r) {
    const MlKeyRule* rule = rule_for(r.key);
    std::vector<int64_t>& seen = seen_[r.key];
    seen.push_back(r.line);
    if (!rule) return;  // keys no rule names are allowed (run_final, tracked_stats, ...)
    const std::string id = r.key + ".";
    if (seen.size() > 1 &&
        (rule->occurrence == MlOccurrence::kExactlyOne || rule->occurrence == MlOccurrence::kAtMostOne))
      violation(r.line, id + "count",
                r.key + " logged again (first at line " + std::to_string(seen.front()) + "); at most one allowed");
    if (run_stop_line_ && r.key != mllog::kRunStop)
      violation(r.line, "after_run_stop",
                r.key + " after run_stop (line " + std::to_string(run_stop_line_) + "): run_stop must be last");
    for (std::string_view before : rule->after)
      if (!seen_.count(std::string(before)))
        violation(r.line, id + "order", r.key + " before any " + std::string(before) + "; it must come after it");
    for (std::string_view later : rule->not_after)
      if (const auto it = seen_.find(std::string(later)); it != seen_.end())
        violation(r.line, id + "order",
                  r.key + " after " + std::string(later) + " (line " + std::to_string(it->second.front()) +
                      "); it must come before it");
    if (auto problem = value_problem(rule->value, r.value, global_batch_))
      violation(r.line, id + "value", r.key + " is " + r.value.dump() + ": " + *problem);
    check_metadata(r, *rule, id);
    if (r.key == mllog::kInitStart) first_init_start_ = std::min(first_init_start_.value_or(r.time_ms), r.time_ms);
    if (r.key == mllog::kInitStop) check_init_time(r);
    if (r.key == mllog::kEvalAccuracy && !run_stop_line_ && r.value.is_number() &&
        r.value.get<double>() >= rules_.closed_target && r.value.get<double>() < 1.0 && !reached_line_)
      reached_line_ = r.line;
    if (r.key == mllog::kRunStop && !run_stop_line_) {
      run_stop_line_ = r.line;
      const auto status = r.metadata.find("status");
      if (status != r.metadata.end() && status->is_string()) run_stop_status_ = status->get<std::string>();
    }
  }

  void check_metadata(const Record& r, const MlKeyRule& rule, const std::string& id) {
    const auto has_all = [&](const std::vector<std::string_view>& group) {
      return std::all_of(group.begin(), group.end(), [&](std::string_view n) { return r.metadata.contains(n); });
    };
    if (!rule.metadata.empty() && std::none_of(rule.metadata.begin(), rule.metadata.end(), has_all)) {
      std::string need;
      for (size_t i = 0; i < rule.metadata.size(); ++i) need += (i ? ", or " : "") + join(rule.metadata[i], " and ");
      violation(r.line, id + "metadata", r.key + " lacks metadata " + need);
    }
    for (const auto& [name, value_rule] : rule.metadata_values) {
      const auto it = r.metadata.find(name);
      if (it == r.metadata.end()) continue;
      if (auto problem = value_problem(value_rule, *it, global_batch_))
        violation(r.line, id + "metadata",
                  r.key + " metadata " + std::string(name) + " is " + it->dump() + ": " + *problem);
    }
  }

  void check_init_time(const Record& init_stop) {
    if (!first_init_start_) return;  // init_stop.order says so
    const double minutes = report_.division == "open" ? rules_.open_init_minutes : rules_.closed_init_minutes;
    const double took_ms = init_stop.time_ms - *first_init_start_;
    if (took_ms < minutes * 60e3) return;
    char text[200];
    std::snprintf(text, sizeof text, "init took %.1f min (first init_start to init_stop); the %s division allows less "
                  "than %g min", took_ms / 60e3, report_.division.c_str(), minutes);
    violation(init_stop.line, "init_time", text);
  }

  void check_counts() {
    std::set<std::set<std::string_view>> alternatives_done;
    for (const MlKeyRule& rule : active_) {
      const auto it = seen_.find(std::string(rule.key));
      const size_t count = it == seen_.end() ? 0 : it->second.size();
      const std::string id = std::string(rule.key) + ".count";
      switch (rule.occurrence) {
        case MlOccurrence::kExactlyOne:
          if (count == 0) violation(0, id, "no " + std::string(rule.key) + " record; exactly one required");
          break;
        case MlOccurrence::kAtLeastOne:
          if (count == 0) violation(0, id, "no " + std::string(rule.key) + " record; at least one required");
          break;
        case MlOccurrence::kAtLeastOneOr: {
          std::set<std::string_view> names(rule.alternatives.begin(), rule.alternatives.end());
          names.insert(rule.key);
          if (!alternatives_done.insert(names).second) break;
          const auto logged = [&](std::string_view n) { return seen_.count(std::string(n)) > 0; };
          if (std::none_of(names.begin(), names.end(), logged)) {
            std::vector<std::string_view> all = {rule.key};
            all.insert(all.end(), rule.alternatives.begin(), rule.alternatives.end());
            violation(0, id, "no " + join(all, " or ") + " record; at least one required");
          }
          break;
        }
        case MlOccurrence::kAtMostOne: break;
      }
    }
  }

  // Closed: the run reached the target, at some eval_accuracy before run_stop.
  void check_result() {
    if (reached_line_) return;
    char target[64];
    std::snprintf(target, sizeof target, "[%g, 1)", rules_.closed_target);
    if (run_stop_status_ == mllog::kSuccess)
      violation(run_stop_line_, "result",
                std::string("run_stop says success, but no eval_accuracy before it is in ") + target);
    else
      violation(run_stop_line_, "result",
                std::string("no eval_accuracy before run_stop is in ") + target + ": the log is not a result" +
                    (run_stop_status_.empty() ? "" : " (status " + run_stop_status_ + ")"));
  }

  MlRuleSet rules_;
  MlCheckReport report_;
  std::vector<Record> records_;
  std::vector<MlKeyRule> active_;
  std::map<std::string, size_t> index_;  // key -> active_
  std::map<std::string, std::vector<int64_t>> seen_;  // key -> the lines that logged it, so far
  std::optional<double> global_batch_;
  std::optional<double> first_init_start_;
  int64_t run_stop_line_ = 0;
  std::string run_stop_status_;
  int64_t reached_line_ = 0;
};

}  // namespace

std::string MlViolation::str() const { return file + ":" + std::to_string(line) + ": " + rule + ": " + message; }

bool MlCheckReport::has(std::string_view rule) const {
  return std::any_of(violations.begin(), violations.end(), [&](const MlViolation& v) { return v.rule == rule; });
}

MlCheckReport check_mllog(std::string_view text, const std::string& file, MlBenchmark benchmark) {
  return Checker(file, benchmark).run(text);
}

MlCheckReport check_mllog_file(const std::string& path, MlBenchmark benchmark) {
  std::error_code ec;
  DP_CHECK(!std::filesystem::is_directory(path, ec), "MLLOG file '", path, "' is a directory; give the log file");
  std::ifstream in(path, std::ios::binary);
  DP_CHECK(in, "cannot open MLLOG file '", path, "': ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DP_CHECK(!in.bad(), "cannot read MLLOG file '", path, "': ", std::strerror(errno));
  return check_mllog(text, path, benchmark);  // an empty file: "no ':::MLLOG ' lines"
}

int run_check_mllog(const std::string& path, MlBenchmark benchmark, std::FILE* out, std::FILE* err) {
  MlCheckReport report;
  try {
    report = check_mllog_file(path, benchmark);
  } catch (const Error& e) {
    std::fprintf(err, "dptrain check-mllog: error: %s\n", e.what());
    return 2;
  }
  for (const MlViolation& v : report.violations) std::fprintf(out, "%s\n", v.str().c_str());
  const std::string rules = "MLPerf " + std::string(mllog_benchmark_name(benchmark)) + " " + report.version + " (" +
                            report.division + " division, " + std::to_string(report.records) + " records)";
  if (report.compliant())
    std::fprintf(out, "%s: compliant with %s\n", path.c_str(), rules.c_str());
  else
    std::fprintf(out, "%s: NOT compliant with %s: %zu violation%s\n", path.c_str(), rules.c_str(),
                 report.violations.size(), report.violations.size() == 1 ? "" : "s");
  return report.compliant() ? 0 : 1;
}

}  // namespace dp
