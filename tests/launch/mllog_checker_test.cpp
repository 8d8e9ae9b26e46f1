// The MLLOG compliance checker: good ResNet (LARS, SGD) and BERT logs written with our writer pass;
// logs broken one way each fail naming that rule; the dptrain check-mllog program's exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/expect_error.h"
#include "common/run_program.h"
#include "launch/cli.h"
#include "launch/config.h"
#include "launch/mllog.h"
#include "common/mllog_recipes.h"
#include "launch/mllog_checker.h"

namespace dp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kMinute = 60'000;

struct Event {
  int64_t time_ms = 0;
  std::string type;
  std::string key;
  MlValue value;
  MlMetadata metadata;
};

// A log as events, edited by the tests, then written with the writer's own line format.
class Log {
 public:
  void start(std::string_view key, MlValue value = nullptr, MlMetadata metadata = {}) {
    add("INTERVAL_START", key, std::move(value), std::move(metadata));
  }
  void end(std::string_view key, MlValue value = nullptr, MlMetadata metadata = {}) {
    add("INTERVAL_END", key, std::move(value), std::move(metadata));
  }
  void event(std::string_view key, MlValue value = nullptr, MlMetadata metadata = {}) {
    add("POINT_IN_TIME", key, std::move(value), std::move(metadata));
  }
  void events(const std::vector<MlRecord>& records) {
    for (const MlRecord& r : records) event(r.key, r.value);
  }

  std::string text() const {
    std::string out;
    for (size_t i = 0; i < events_.size(); ++i) {
      const Event& e = events_[i];
      out += mllog_line(e.time_ms, e.type, e.key, e.value, "mllog_checker_test.cpp", static_cast<int64_t>(i) + 1,
                        e.metadata) +
             "\n";
    }
    return out;
  }

  // The n-th event with `key`; a dp::Error when there is none (the edit would test nothing).
  Event& at(std::string_view key, int n = 0) { return events_[index(key, n)]; }
  // Its 1-based line in text().
  int64_t line_of(std::string_view key, int n = 0) const { return static_cast<int64_t>(index(key, n)) + 1; }
  void erase(std::string_view key) {
    DP_CHECK(std::erase_if(events_, [&](const Event& e) { return e.key == key; }) > 0, "no event ", key, " to erase");
  }
  void insert_before(std::string_view key, Event e) { events_.insert(events_.begin() + index(key, 0), std::move(e)); }
  void append(Event e) { events_.push_back(std::move(e)); }
  // Moves `key` (its first event) to just before `before`.
  void move_before(std::string_view key, std::string_view before) {
    Event e = at(key);
    events_.erase(events_.begin() + index(key, 0));
    insert_before(before, std::move(e));
  }
  // Delays every event from `key` on by `ms`.
  void delay_from(std::string_view key, int64_t ms) {
    for (size_t i = index(key, 0); i < events_.size(); ++i) events_[i].time_ms += ms;
  }

 private:
  void add(std::string type, std::string_view key, MlValue value, MlMetadata metadata) {
    events_.push_back({now_, std::move(type), std::string(key), std::move(value), std::move(metadata)});
    now_ += 1000;
  }
  size_t index(std::string_view key, int n) const {
    for (size_t i = 0; i < events_.size(); ++i)
      if (events_[i].key == key && n-- == 0) return i;
    throw Error("no event " + std::string(key));
  }

  std::vector<Event> events_;
  int64_t now_ = 1'700'000'000'000;
};

Config lars_config() { return testing::mllog_lars_config(); }
Config sgd_config() { return testing::mllog_sgd_config(); }
Config lamb_config() { return testing::mllog_lamb_config(); }

void log_submission(Log& log, MlBenchmark benchmark) {
  MlSubmission s;
  s.org = "dptrain";
  s.platform = "8xH100";
  s.benchmark = benchmark;
  log.events(mllog_submission_records(s));
  log.event(mllog::kCacheClear, true);
}

// NOTE [ MLLOG call order ] in launch/mllog.h, for ResNet in blocks of 4 epochs with an
// evaluation after each; the third reaches the target.
Log resnet_log(const Config& config = lars_config()) {
  Log log;
  log_submission(log, MlBenchmark::kResnet);
  log.start(mllog::kInitStart);
  MlRunFacts facts;
  facts.steps_per_epoch = 401;
  facts.bn_span = config.data.batch_size / 8;
  facts.train_samples = 1281167;
  facts.eval_samples = 50000;
  log.events(mllog_hyperparameters(MlBenchmark::kResnet, config, facts));
  log.end(mllog::kInitStop);
  log.start(mllog::kRunStart);
  const double accuracy[] = {0.31, 0.62, 0.7612};
  for (int b = 0; b < 3; ++b) {
    const int first = 1 + 4 * b;
    log.start(mllog::kBlockStart, nullptr, {{"first_epoch_num", first}, {"epoch_count", 4}});
    log.end(mllog::kBlockStop, nullptr, {{"first_epoch_num", first}});
    log.start(mllog::kEvalStart, nullptr, {{"epoch_num", first + 3}});
    log.event(mllog::kEvalAccuracy, accuracy[b], {{"epoch_num", first + 3}});
    log.end(mllog::kEvalStop, nullptr, {{"epoch_num", first + 3}});
  }
  log.end(mllog::kRunStop, nullptr, {{"status", "success"}});
  return log;
}

// BERT: blocks counted in samples, evaluations labelled with the samples trained so far.
Log bert_log() {
  Log log;
  log_submission(log, MlBenchmark::kBert);
  log.start(mllog::kInitStart);
  MlRunFacts facts;
  facts.steps_per_epoch = 3350;
  facts.bn_span = 56;
  facts.train_samples = 1500000;
  facts.eval_samples = 10000;
  log.events(mllog_hyperparameters(MlBenchmark::kBert, lamb_config(), facts));
  log.end(mllog::kInitStop);
  log.start(mllog::kRunStart);
  const double accuracy[] = {0.70, 0.7213};
  for (int b = 0; b < 2; ++b) {
    const int64_t samples = 200'000 * (b + 1);
    log.start(mllog::kBlockStart, nullptr, {{"samples_count", samples - 200'000}});
    log.end(mllog::kBlockStop, nullptr, {{"samples_count", samples}});
    log.start(mllog::kEvalStart, nullptr, {{"epoch_num", samples}});
    log.event(mllog::kEvalAccuracy, accuracy[b], {{"epoch_num", samples}});
    log.end(mllog::kEvalStop, nullptr, {{"epoch_num", samples}});
  }
  log.end(mllog::kRunStop, nullptr, {{"status", "success"}});
  return log;
}

std::string listing(const MlCheckReport& report) {
  std::string out;
  for (const MlViolation& v : report.violations) out += v.str() + "\n";
  return out.empty() ? "(no violations)\n" : out;
}

MlCheckReport check(const Log& log, MlBenchmark benchmark = MlBenchmark::kResnet) {
  return check_mllog(log.text(), "log.txt", benchmark);
}

TEST(MllogChecker, GoodLogsPass) {
  const MlCheckReport lars = check(resnet_log());
  EXPECT_TRUE(lars.compliant()) << listing(lars);
  EXPECT_EQ(lars.division, "closed");
  EXPECT_EQ(lars.version, "4.0.0");
  EXPECT_GT(lars.records, 40);
  const MlCheckReport sgd = check(resnet_log(sgd_config()));
  EXPECT_TRUE(sgd.compliant()) << listing(sgd);
  const MlCheckReport bert = check(bert_log(), MlBenchmark::kBert);
  EXPECT_TRUE(bert.compliant()) << listing(bert);
  EXPECT_EQ(bert.version, "5.0.0");
}

// Written through MlLogger to a file, read back by check_mllog_file: writer and checker agree.
TEST(MllogChecker, AFileTheLoggerWrotePasses) {
  const fs::path dir = testing::make_test_dir("mllog_checker");
  const std::string path = (dir / "result_0.txt").string();
  {
    int64_t now = 1'700'000'000'000;
    MlLogger log(path, [&] { return now += 500; });
    MlSubmission s;
    s.org = "dptrain";
    s.platform = "8xH100";
    for (const MlRecord& r : mllog_submission_records(s)) log.event(r.key, r.value);
    log.event(mllog::kCacheClear, true);
    log.start(mllog::kInitStart);
    MlRunFacts facts;
    facts.steps_per_epoch = 401;
    facts.bn_span = 400;
    facts.train_samples = 1281167;
    facts.eval_samples = 50000;
    for (const MlRecord& r : mllog_hyperparameters(MlBenchmark::kResnet, lars_config(), facts))
      log.event(r.key, r.value);
    log.end(mllog::kInitStop);
    log.start(mllog::kRunStart);
    for (int e = 1; e <= 4; ++e) {
      log.start(mllog::kEpochStart, nullptr, {{"epoch_num", e}});
      log.end(mllog::kEpochStop, nullptr, {{"epoch_num", e}});
    }
    log.start(mllog::kEvalStart, nullptr, {{"epoch_num", 4}});
    log.event(mllog::kEvalAccuracy, 0.7601, {{"epoch_num", 4}});
    log.end(mllog::kEvalStop, nullptr, {{"epoch_num", 4}});
    log.end(mllog::kRunStop, nullptr, {{"status", "success"}});
  }
  const MlCheckReport report = check_mllog_file(path, MlBenchmark::kResnet);
  EXPECT_TRUE(report.compliant()) << listing(report);
  EXPECT_EQ(report.file, path);
  EXPECT_ERROR_CONTAINS(check_mllog_file((dir / "missing.txt").string(), MlBenchmark::kResnet),
                        "cannot open MLLOG file");
  // A directory is named as one; an empty file is read, and holds no MLLOG lines.
  EXPECT_ERROR_CONTAINS(check_mllog_file(dir.string(), MlBenchmark::kResnet), "' is a directory; give the log file");
  std::ofstream(dir / "empty.txt").flush();
  const MlCheckReport empty = check_mllog_file((dir / "empty.txt").string(), MlBenchmark::kResnet);
  EXPECT_FALSE(empty.compliant());
  EXPECT_THAT(listing(empty), ::testing::HasSubstr("no ':::MLLOG ' lines"));
  fs::remove_all(dir);
}

struct BrokenLog {
  const char* name;
  MlBenchmark benchmark;
  std::function<Log()> make;
  const char* rule;  // the rule the checker must name
};

Event point(std::string key, MlValue value, MlMetadata metadata = {}) {
  return {1'700'000'100'000, "POINT_IN_TIME", std::move(key), std::move(value), std::move(metadata)};
}

// One log per rule, each broken in one way from a good one.
std::vector<BrokenLog> broken_logs() {
  using B = MlBenchmark;
  auto resnet_with = [](std::function<void(Log&)> edit) {
    return [edit] {
      Log log = resnet_log();
      edit(log);
      return log;
    };
  };
  return {
      {"no submission_org", B::kResnet, resnet_with([](Log& l) { l.erase("submission_org"); }), "submission_org.count"},
      {"run_start twice", B::kResnet, resnet_with([](Log& l) { l.insert_before("block_start", l.at("run_start")); }),
       "run_start.count"},
      {"run_start before init_stop", B::kResnet, resnet_with([](Log& l) { l.move_before("run_start", "init_stop"); }),
       "run_start.order"},
      {"lars weight decay 3e-4", B::kResnet, resnet_with([](Log& l) { l.at("lars_opt_weight_decay").value = 3e-4; }),
       "lars_opt_weight_decay.value"},
      {"eval_accuracy without epoch_num", B::kResnet,
       resnet_with([](Log& l) { l.at("eval_accuracy", 1).metadata.clear(); }), "eval_accuracy.metadata"},
      {"lars_epsilon 1e-9", B::kResnet, resnet_with([](Log& l) { l.at("lars_epsilon").value = 1e-9; }),
       "lars_epsilon.value"},
      {"run_stop without status", B::kResnet, resnet_with([](Log& l) { l.at("run_stop").metadata.clear(); }),
       "run_stop.metadata"},
      {"run_stop status done", B::kResnet,
       resnet_with([](Log& l) { l.at("run_stop").metadata = {{"status", "done"}}; }), "run_stop.metadata"},
      {"no run_stop", B::kResnet, resnet_with([](Log& l) { l.erase("run_stop"); }), "run_stop.count"},
      {"init 31 min", B::kResnet, resnet_with([](Log& l) { l.delay_from("init_stop", 31 * kMinute); }), "init_time"},
      {"lars end lr 1e-3", B::kResnet, resnet_with([](Log& l) { l.at("lars_opt_end_learning_rate").value = 1e-3; }),
       "lars_opt_end_learning_rate.value"},
      {"lars poly power 1", B::kResnet,
       resnet_with([](Log& l) { l.at("lars_opt_learning_rate_decay_poly_power").value = 1.0; }),
       "lars_opt_learning_rate_decay_poly_power.value"},
      {"lars momentum 0.95 below batch 32k", B::kResnet,
       resnet_with([](Log& l) { l.at("lars_opt_momentum").value = 0.95; }), "lars_opt_momentum.value"},
      {"sgd base lr 0.0105", B::kResnet,
       [] {
         Log l = resnet_log(sgd_config());
         l.at("sgd_opt_base_learning_rate").value = 0.0105;
         return l;
       },
       "sgd_opt_base_learning_rate.value"},
      {"sgd without model_bn_span", B::kResnet,
       [] {
         Log l = resnet_log(sgd_config());
         l.erase("model_bn_span");
         return l;
       },
       "model_bn_span.count"},
      {"label smoothing 0.2", B::kResnet, resnet_with([](Log& l) { l.at("label_smoothing").value = 0.2; }),
       "label_smoothing.value"},
      {"bert without opt_lamb_beta_1", B::kBert,
       [] {
         Log l = bert_log();
         l.erase("opt_lamb_beta_1");
         return l;
       },
       "opt_lamb_beta_1.count"},
      {"bert success below 0.720", B::kBert,
       [] {
         Log l = bert_log();
         l.at("eval_accuracy", 1).value = 0.7199;
         return l;
       },
       "result"},
      {"success without reaching 0.759", B::kResnet,
       resnet_with([](Log& l) { l.at("eval_accuracy", 2).value = 0.7589; }), "result"},
      {"the target reached only after run_stop", B::kResnet,
       resnet_with([](Log& l) { l.move_before("run_stop", "eval_accuracy"); }), "result"},
      {"eval_accuracy 76.12 (a percentage)", B::kResnet,
       resnet_with([](Log& l) { l.at("eval_accuracy", 2).value = 76.12; }), "eval_accuracy.value"},
      {"eval_accuracy 1.0", B::kResnet, resnet_with([](Log& l) { l.at("eval_accuracy", 2).value = 1.0; }),
       "eval_accuracy.value"},
      {"an evaluation after run_stop", B::kResnet,
       resnet_with([](Log& l) { l.append(point("eval_accuracy", 0.77, {{"epoch_num", 16}})); }), "after_run_stop"},
      {"submission_division mixed", B::kResnet,
       resnet_with([](Log& l) { l.at("submission_division").value = "mixed"; }), "submission_division.value"},
      {"gradient_accumulation_steps 0", B::kResnet,
       resnet_with([](Log& l) { l.at("gradient_accumulation_steps").value = 0; }),
       "gradient_accumulation_steps.value"},
      {"a resnet log checked as bert", B::kBert, [] { return resnet_log(); }, "submission_benchmark.value"},
      {"opt_name adam", B::kResnet, resnet_with([](Log& l) { l.at("opt_name").value = "adam"; }), "opt_name.value"},
      {"block_start before run_start", B::kResnet,
       resnet_with([](Log& l) { l.move_before("block_start", "run_start"); }), "block_start.order"},
      {"block_start without epoch_count", B::kResnet,
       resnet_with([](Log& l) { l.at("block_start").metadata = {{"first_epoch_num", 1}}; }), "block_start.metadata"},
      {"no epochs or blocks", B::kResnet,
       resnet_with([](Log& l) {
         l.erase("block_start");
         l.erase("block_stop");
       }),
       "block_start.count"},
      {"no cache_clear", B::kResnet, resnet_with([](Log& l) { l.erase("cache_clear"); }), "cache_clear.count"},
  };
}

TEST(MllogChecker, EachBrokenLogFailsNamingItsRule) {
  const std::vector<BrokenLog> cases = broken_logs();
  ASSERT_GE(cases.size(), 14u);
  for (const BrokenLog& c : cases) {
    SCOPED_TRACE(c.name);
    const MlCheckReport report = check_mllog(c.make().text(), "log.txt", c.benchmark);
    EXPECT_FALSE(report.compliant());
    EXPECT_TRUE(report.has(c.rule)) << "expected rule " << c.rule << ", got:\n" << listing(report);
    for (const MlViolation& v : report.violations) EXPECT_THAT(v.str(), ::testing::StartsWith("log.txt:"));
  }
}

TEST(MllogChecker, MalformedJsonIsAViolationOnItsLine) {
  std::string text = resnet_log().text();
  text += ":::MLLOG {\"namespace\": \"\", \"time_ms\": 17\n";                  // cut short
  text += ":::MLLOG {\"time_ms\": 1, \"key\": \"seed2\", \"value\": 1, \"metadata\": {}}\n";  // no event_type
  const MlCheckReport report = check_mllog(text, "log.txt", MlBenchmark::kResnet);
  const int64_t lines = std::count(text.begin(), text.end(), '\n');
  ASSERT_EQ(report.violations.size(), 2u) << listing(report);
  EXPECT_EQ(report.violations[0].str(), "log.txt:" + std::to_string(lines - 1) +
                                            ": parse: malformed JSON after ':::MLLOG '");
  EXPECT_EQ(report.violations[1].str(), "log.txt:" + std::to_string(lines) + ": parse: record lacks \"event_type\"");
  EXPECT_EQ(report.records, lines);
}

TEST(MllogChecker, ViolationsNameTheLineAndWhatWasExpected) {
  Log log = resnet_log();
  log.at("lars_epsilon").value = 1e-9;
  log.erase("submission_org");
  const MlCheckReport report = check(log);
  ASSERT_EQ(report.violations.size(), 2u) << listing(report);
  EXPECT_EQ(report.violations[0].str(), "log.txt:" + std::to_string(log.line_of("lars_epsilon")) +
                                            ": lars_epsilon.value: lars_epsilon is 1e-09: expected 0");
  // A key that never appears is the log's as a whole: line 0, after the others.
  EXPECT_EQ(report.violations[1].str(), "log.txt:0: submission_org.count: no submission_org record; exactly one "
                                        "required");
}

TEST(MllogChecker, WeightDecayIsAPowerOfTwoTimes1e4) {
  for (double wd : {1.25e-5, 2.5e-5, 5e-5, 1e-4, 2e-4, 4e-4, 8e-4}) {
    Log log = resnet_log();
    log.at("lars_opt_weight_decay").value = wd;
    EXPECT_TRUE(check(log).compliant()) << wd << "\n" << listing(check(log));
  }
  for (double wd : {0.0, -1e-4, 3e-4, 1.5e-4, 1e-5}) {
    Log log = resnet_log();
    log.at("lars_opt_weight_decay").value = wd;
    EXPECT_TRUE(check(log).has("lars_opt_weight_decay.value")) << wd;
  }
}

TEST(MllogChecker, BoundariesOfTheValueRules) {
  Log log = resnet_log();
  log.delay_from("init_stop", 29 * kMinute);  // below 30 minutes
  log.at("eval_accuracy", 2).value = 0.759;  // the target itself counts
  log.at("label_smoothing").value = 0;       // an integer 0 is 0
  EXPECT_TRUE(check(log).compliant()) << listing(check(log));
  Log sgd = resnet_log(sgd_config());
  sgd.at("sgd_opt_base_learning_rate").value = 10.207;  // 10207 x 0.001
  EXPECT_TRUE(check(sgd).compliant()) << listing(check(sgd));
  // LARS momentum is free from a global batch of 32k on.
  Log big = resnet_log();
  big.at("global_batch_size").value = 65536;
  big.at("lars_opt_momentum").value = 0.94;
  EXPECT_TRUE(check(big).compliant()) << listing(check(big));
}

TEST(MllogChecker, OpenDivisionSkipsTheClosedRules) {
  Log log = resnet_log();
  log.at("submission_division").value = "open";
  log.at("lars_epsilon").value = 1e-9;                  // a closed hyperparameter rule
  log.at("eval_accuracy", 2).value = 0.70;              // no target
  log.delay_from("init_stop", 200 * kMinute);           // open allows 4 hours
  const MlCheckReport open = check(log);
  EXPECT_TRUE(open.compliant()) << listing(open);
  EXPECT_EQ(open.division, "open");
  log.delay_from("init_stop", 41 * kMinute);
  EXPECT_TRUE(check(log).has("init_time"));
}

TEST(MllogChecker, IgnoresOtherLinesAndUnknownKeys) {
  Log log = resnet_log();
  log.insert_before("block_start", point("tracked_stats", nullptr, {{"step", 10}}));
  log.append(point("run_final", nullptr));  // the reference logs it after run_stop
  std::string text = "dptrain 0.1.0 starting\n";
  // mpirun --tag-output puts its prefix before the marker; text without the marker is ignored.
  const std::string body = log.text();
  size_t begin = 0;
  while (begin < body.size()) {
    const size_t end = body.find('\n', begin);
    text += "[1,0]<stdout>:" + body.substr(begin, end - begin) + "\nepoch 1 step 10 loss 2.3\n";
    begin = end + 1;
  }
  const MlCheckReport report = check_mllog(text, "log.txt", MlBenchmark::kResnet);
  EXPECT_TRUE(report.compliant()) << listing(report);
  // Line numbers are the file's, non-MLLOG lines counted.
  log.at("lars_epsilon").value = 1.0;
  const MlCheckReport bad = check_mllog("noise\n" + log.text(), "log.txt", MlBenchmark::kResnet);
  ASSERT_EQ(bad.violations.size(), 1u) << listing(bad);
  EXPECT_EQ(bad.violations[0].line, log.line_of("lars_epsilon") + 1);
}

TEST(MllogChecker, AnAbortedRunIsNotAResult) {
  Log log = resnet_log();
  log.at("eval_accuracy", 2).value = 0.70;
  log.at("run_stop").metadata = {{"status", "aborted"}};
  const MlCheckReport report = check(log);
  ASSERT_EQ(report.violations.size(), 1u) << listing(report);
  EXPECT_THAT(report.violations[0].str(), HasSubstr("result: no eval_accuracy before run_stop is in [0.759, 1)"));
  EXPECT_THAT(report.violations[0].str(), HasSubstr("(status aborted)"));
}

TEST(MllogChecker, EpochsBySamplesOnlyFromRuleSet5) {
  // 5.0.0 (BERT) accepts samples_count on epoch_start; 4.0.0 (ResNet) wants epoch_num.
  const Event by_samples = {1'700'000'050'000, "INTERVAL_START", "epoch_start", nullptr, {{"samples_count", 0}}};
  Log bert = bert_log();
  bert.insert_before("block_start", by_samples);
  EXPECT_TRUE(check(bert, MlBenchmark::kBert).compliant()) << listing(check(bert, MlBenchmark::kBert));
  Log resnet = resnet_log();
  resnet.insert_before("block_start", by_samples);
  EXPECT_TRUE(check(resnet).has("epoch_start.metadata")) << listing(check(resnet));
}

TEST(MllogChecker, AFileWithoutRecords) {
  const MlCheckReport report = check_mllog("just text\n", "log.txt", MlBenchmark::kBert);
  ASSERT_EQ(report.violations.size(), 1u) << listing(report);
  EXPECT_EQ(report.violations[0].str(), "log.txt:0: parse: no ':::MLLOG ' lines");
}

TEST(MllogChecker, RuleSetsAreData) {
  const MlRuleSet resnet = mllog_rule_set(MlBenchmark::kResnet);
  EXPECT_EQ(resnet.branch_key, "opt_name");
  ASSERT_EQ(resnet.branches.size(), 2u);
  EXPECT_DOUBLE_EQ(resnet.closed_target, 0.759);
  EXPECT_DOUBLE_EQ(mllog_rule_set(MlBenchmark::kBert).closed_target, 0.720);
  EXPECT_DOUBLE_EQ(resnet.closed_init_minutes, 30);
}

TEST(MllogProgram, ParsesTheSubcommand) {
  const char* argv[] = {"dptrain", "check-mllog", "result_0.txt", "--benchmark", "bert"};
  const std::variant<CliArgs, int> parsed = parse_cli(5, argv);
  ASSERT_TRUE(std::holds_alternative<CliArgs>(parsed));
  const CliArgs& args = std::get<CliArgs>(parsed);
  ASSERT_TRUE(args.check_mllog.has_value());
  EXPECT_EQ(args.check_mllog->path, "result_0.txt");
  EXPECT_EQ(args.check_mllog->benchmark, "bert");
  EXPECT_TRUE(args.config_path.empty());
  // Training still needs --config.
  const char* train[] = {"dptrain", "--config", "a.yaml"};
  const std::variant<CliArgs, int> trained = parse_cli(3, train);
  ASSERT_TRUE(std::holds_alternative<CliArgs>(trained));
  EXPECT_FALSE(std::get<CliArgs>(trained).check_mllog.has_value());
}

// The program: exit 0 compliant, 1 not, 2 unreadable file or usage error; no config, no MPI.
TEST(MllogProgram, CheckMllogExitCodes) {
  const fs::path dir = testing::make_test_dir("mllog_program");
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return (dir / name).string();
  };
  const std::string good = write("good.txt", resnet_log().text());
  Log broken = resnet_log();
  broken.at("lars_epsilon").value = 0.5;
  const std::string bad = write("bad.txt", broken.text());
  const std::string dptrain = testing::dptrain_binary();

  testing::ProgramResult r = testing::run_program(dptrain + " check-mllog " + good + " --benchmark resnet");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(good + ": compliant with MLPerf resnet 4.0.0 (closed division"));

  r = testing::run_program(dptrain + " check-mllog " + bad + " --benchmark resnet");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(bad + ":" + std::to_string(broken.line_of("lars_epsilon")) +
                                  ": lars_epsilon.value: lars_epsilon is 0.5: expected 0\n"));
  EXPECT_THAT(r.output, HasSubstr(bad + ": NOT compliant with MLPerf resnet 4.0.0"));

  r = testing::run_program(dptrain + " check-mllog " + good + " --benchmark bert");  // the wrong rule set
  EXPECT_EQ(r.exit_code, 1) << r.output;

  r = testing::run_program(dptrain + " check-mllog " + (dir / "missing.txt").string() + " --benchmark resnet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot open MLLOG file"));
  r = testing::run_program(dptrain + " check-mllog " + good + " --benchmark ssd");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = testing::run_program(dptrain + " check-mllog " + good);  // --benchmark missing
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = testing::run_program(dptrain + " --config x.yaml check-mllog " + good + " --benchmark resnet");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dp
