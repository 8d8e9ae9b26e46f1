#include "launch/mllog.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "launch/config.h"
#include "launch/metrics_log.h"
#include "runtime/core/error.h"

namespace dp {

namespace {

nlohmann::ordered_json to_json(const MlValue& value) {
  return std::visit([](const auto& v) { return nlohmann::ordered_json(v); }, value.variant());
}

// The reference logger names the calling Python file; a C++ caller's full path would leak the
// build machine's directories into a result log.
std::string_view file_name_only(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string mllog_line(int64_t time_ms, std::string_view event_type, std::string_view key, const MlValue& value,
                       std::string_view file, int64_t lineno, const MlMetadata& metadata) {
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  meta["file"] = file;
  meta["lineno"] = lineno;
  for (const auto& [name, v] : metadata) meta[name] = to_json(v);
  nlohmann::ordered_json record = nlohmann::ordered_json::object();
  record["namespace"] = "";
  record["time_ms"] = time_ms;
  record["event_type"] = event_type;
  record["key"] = key;
  record["value"] = to_json(value);
  record["metadata"] = std::move(meta);
  // Python's json.dumps separators (", " and ": "), which the reference logs show.
  std::string out = ":::MLLOG ";
  out.reserve(256);
  std::string compact = record.dump();
  // dump() has no separator option: re-emit with spaces, outside strings only.
  bool in_string = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    out += c;
    if (in_string) {
      if (c == '\\') {
        out += compact[++i];
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

MlLogger::MlLogger() = default;

MlLogger::MlLogger(const std::string& path, Clock clock) : path_(path), clock_(std::move(clock)) {
  namespace fs = std::filesystem;
  DP_CHECK(!path.empty(), "MLLOG file: empty path");
  DP_CHECK(clock_, "MLLOG file '", path, "': no clock");
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  DP_CHECK(!ec, "cannot create directory '", p.parent_path().string(), "' for the MLLOG file: ", ec.message());
  kept_previous_ = keep_existing_file(path, "logging.mllog");
  // O_EXCL: if something appeared at `path` since, fail rather than overwrite it.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  DP_CHECK(fd >= 0, "cannot create MLLOG file '", path, "': ", std::strerror(errno));
  file_ = fdopen(fd, "w");
  if (!file_) {
    const int err = errno;
    close(fd);
    throw Error("cannot open MLLOG file '" + path + "' for writing: " + std::strerror(err));
  }
}

MlLogger::~MlLogger() {
  if (file_) std::fclose(file_);
}

MlLogger::MlLogger(MlLogger&& other) noexcept
    : path_(std::move(other.path_)),
      kept_previous_(std::move(other.kept_previous_)),
      file_(std::exchange(other.file_, nullptr)),
      clock_(std::move(other.clock_)) {}

MlLogger& MlLogger::operator=(MlLogger&& other) noexcept {
  if (this != &other) {
    if (file_) std::fclose(file_);
    path_ = std::move(other.path_);
    kept_previous_ = std::move(other.kept_previous_);
    file_ = std::exchange(other.file_, nullptr);
    clock_ = std::move(other.clock_);
  }
  return *this;
}

int64_t MlLogger::system_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void MlLogger::start(std::string_view key, const MlValue& value, const MlMetadata& metadata,
                     std::source_location where) {
  write("INTERVAL_START", key, value, metadata, where);
}

void MlLogger::end(std::string_view key, const MlValue& value, const MlMetadata& metadata,
                   std::source_location where) {
  write("INTERVAL_END", key, value, metadata, where);
}

void MlLogger::event(std::string_view key, const MlValue& value, const MlMetadata& metadata,
                     std::source_location where) {
  write("POINT_IN_TIME", key, value, metadata, where);
}

void MlLogger::write(std::string_view event_type, std::string_view key, const MlValue& value,
                     const MlMetadata& metadata, const std::source_location& where) {
  if (!file_) return;
  // The time is taken here, when the event happens, not when the caller built its arguments.
  const std::string line = mllog_line(clock_(), event_type, key, value, file_name_only(where.file_name()),
                                      static_cast<int64_t>(where.line()), metadata) +
                           "\n";
  DP_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
           "writing MLLOG file '", path_, "' failed: ", std::strerror(errno));
}

std::string_view mllog_benchmark_name(MlBenchmark benchmark) {
  switch (benchmark) {
    case MlBenchmark::kResnet: return "resnet";
    case MlBenchmark::kBert: return "bert";
  }
  throw Error("mllog: unknown benchmark");
}

MlBenchmark parse_mllog_benchmark(std::string_view name) {
  for (MlBenchmark b : {MlBenchmark::kResnet, MlBenchmark::kBert})
    if (mllog_benchmark_name(b) == name) return b;
  throw Error("unknown MLPerf benchmark '" + std::string(name) + "' (expected one of: resnet, bert)");
}

std::vector<MlRecord> mllog_submission_records(const MlSubmission& s) {
  return {{std::string(mllog::kSubmissionBenchmark), mllog_benchmark_name(s.benchmark)},
          {std::string(mllog::kSubmissionDivision), s.division},
          {std::string(mllog::kSubmissionOrg), s.org},
          {std::string(mllog::kSubmissionPlatform), s.platform},
          {std::string(mllog::kSubmissionStatus), s.status}};
}

namespace {

// The schedule as MLPerf's keys describe it: linear warmup from 0, then polynomial decay to an
// end lr (optim/lr_schedule.h, NOTE [ LR warmup ]; the trainer's make_schedule).
struct PolySchedule {
  int64_t total_steps = 0;
  int64_t warmup_steps = 0;
  double power = 0.0;
};

PolySchedule poly_schedule(const Config& config, const MlRunFacts& facts, std::string_view benchmark) {
  const ScheduleConfig& s = config.schedule;
  DP_CHECK(s.name == "poly" || s.name == "linear", "MLLOG ", benchmark, " hyperparameters: the benchmark's keys ",
           "describe warmup then polynomial decay, so schedule.name must be poly or linear, got '", s.name, "'");
  DP_CHECK(facts.steps_per_epoch > 0, "MLLOG ", benchmark, " hyperparameters: steps_per_epoch must be positive, got ",
           facts.steps_per_epoch);
  PolySchedule p;
  const ScheduleSteps steps = schedule_steps(config, facts.steps_per_epoch);
  p.total_steps = steps.total;
  p.warmup_steps = steps.warmup;
  p.power = s.name == "linear" ? 1.0 : s.power;
  return p;
}

void add(std::vector<MlRecord>& records, std::string_view key, MlValue value) {
  records.push_back({std::string(key), std::move(value)});
}

void add_resnet(std::vector<MlRecord>& r, const Config& config, const MlRunFacts& facts) {
  const OptimizerSpec& o = config.optimizer;
  DP_CHECK(o.name == "lars" || o.name == "sgd", "MLLOG resnet hyperparameters: the rules allow opt_name lars or sgd, ",
           "but optimizer.name is '", o.name, "'");
  const PolySchedule p = poly_schedule(config, facts, "resnet");
  DP_CHECK(config.schedule.warmup_steps == 0, "MLLOG resnet hyperparameters: the benchmark's keys give the warmup ",
           "in epochs, so give it as schedule.warmup_epochs (schedule.warmup_steps is ", config.schedule.warmup_steps,
           ")");
  const double weight_decay = o.weight_decay.value_or(default_weight_decay(o.name));
  add(r, mllog::kOptName, o.name);
  if (o.name == "lars") {
    add(r, "lars_opt_base_learning_rate", o.lr);
    add(r, "lars_opt_end_learning_rate", config.schedule.min_lr);
    add(r, "lars_opt_learning_rate_decay_poly_power", p.power);
    add(r, "lars_opt_learning_rate_decay_steps", p.total_steps - p.warmup_steps);
    add(r, "lars_opt_learning_rate_warmup_epochs", config.schedule.warmup_epochs);
    add(r, "lars_opt_momentum", o.momentum);
    add(r, "lars_opt_weight_decay", weight_decay);
    add(r, "lars_epsilon", o.eps.value_or(default_eps(o.name)));
  } else {
    add(r, "sgd_opt_base_learning_rate", o.lr);
    add(r, "sgd_opt_end_learning_rate", config.schedule.min_lr);
    add(r, "sgd_opt_learning_rate_decay_poly_power", p.power);
    add(r, "sgd_opt_learning_rate_decay_steps", p.total_steps - p.warmup_steps);
    add(r, "opt_learning_rate_warmup_epochs", config.schedule.warmup_epochs);
    add(r, "sgd_opt_momentum", o.momentum);
    add(r, "sgd_opt_weight_decay", weight_decay);
  }
  // The reference logs the BatchNorm span with either optimiser; the SGD rules require it.
  DP_CHECK(facts.bn_span > 0, "MLLOG resnet hyperparameters: bn_span (model_bn_span) must be positive, got ",
           facts.bn_span);
  add(r, "model_bn_span", facts.bn_span);
  add(r, "label_smoothing", config.loss.label_smoothing);
}

void add_bert(std::vector<MlRecord>& r, const Config& config, const MlRunFacts& facts) {
  const OptimizerSpec& o = config.optimizer;
  DP_CHECK(o.name == "lamb", "MLLOG bert hyperparameters: the BERT recipe's keys are LAMB's (opt_lamb_*), but ",
           "optimizer.name is '", o.name, "'");
  DP_CHECK(o.betas.size() == 2, "MLLOG bert hyperparameters: optimizer.betas must hold [beta1, beta2], got ",
           o.betas.size(), " values");
  const PolySchedule p = poly_schedule(config, facts, "bert");
  add(r, mllog::kOptName, o.name);
  add(r, "opt_base_learning_rate", o.lr);
  add(r, "opt_lamb_epsilon", o.eps.value_or(default_eps(o.name)));
  add(r, "opt_lamb_beta_1", o.betas[0]);
  add(r, "opt_lamb_beta_2", o.betas[1]);
  add(r, "opt_lamb_weight_decay_rate", o.weight_decay.value_or(default_weight_decay(o.name)));
  add(r, "opt_learning_rate_training_steps", p.total_steps);
  add(r, "opt_learning_rate_warmup_steps", p.warmup_steps);
  add(r, "num_warmup_steps", p.warmup_steps);
  add(r, "start_warmup_step", int64_t{0});
  add(r, "opt_lamb_learning_rate_decay_poly_power", p.power);
}

}  // namespace

int64_t mlperf_bert_eval_interval(int64_t global_batch) {
  DP_CHECK(global_batch > 0, "mlperf_bert_eval_interval: the global batch must be positive, got ", global_batch);
  const double raw = 0.05 * (230.23 * static_cast<double>(global_batch) + 3'000'000.0);
  return static_cast<int64_t>(std::floor(raw / 25'000.0)) * 25'000;
}

std::vector<MlRecord> mllog_hyperparameters(MlBenchmark benchmark, const Config& config, const MlRunFacts& facts) {
  DP_CHECK(facts.gradient_accumulation_steps > 0, "MLLOG hyperparameters: gradient_accumulation_steps must be ",
           "positive, got ", facts.gradient_accumulation_steps);
  std::vector<MlRecord> r;
  add(r, mllog::kSeed, config.run.seed);
  add(r, mllog::kGlobalBatchSize, config.data.batch_size);
  add(r, mllog::kTrainSamples, facts.train_samples);
  add(r, mllog::kEvalSamples, facts.eval_samples);
  add(r, mllog::kGradientAccumulationSteps, facts.gradient_accumulation_steps);
  switch (benchmark) {
    case MlBenchmark::kResnet: add_resnet(r, config, facts); break;
    case MlBenchmark::kBert: add_bert(r, config, facts); break;
  }
  return r;
}

}  // namespace dp
