// dptrain scaling-report (NOTE [ Scaling report ] in launch/scaling_report.h) on metrics files
// written here with known figures: throughput medians after the warm-up records, speedup and
// efficiency against the baseline, the kind of study, the warnings, every format, and the errors
// for files that are not a run's metrics. tests/launch/dptrain_distributed_test.cpp runs it on
// real 1- and 2-rank runs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/expect_error.h"
#include "launch/cli.h"
#include "launch/scaling_report.h"

namespace dp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class ScalingReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dptrain_scaling_report_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A run folder with metrics.jsonl: a start record, one step record per rate (data 1 ms, forward
  // 10, backward 20, comm 2, optimizer 1 in the last), one epoch record, an end record.
  std::string run(const std::string& name, int ranks, int global_batch, const std::vector<double>& rates,
                  const std::string& precision = "fp32", const std::string& end = "completed") {
    const fs::path folder = dir_ / name;
    fs::create_directories(folder);
    std::ofstream out(folder / "metrics.jsonl");
    out << nlohmann::json{{"event", "start"},        {"model", "small_cnn"},        {"device", "cpu"},
                          {"world_size", ranks},      {"nodes", (ranks + 1) / 2},    {"precision", precision},
                          {"grad_dtype", "fp32"},     {"global_batch", global_batch}, {"per_rank_batch", global_batch / ranks},
                          {"unit", "samples"}}
               .dump()
        << "\n";
    int step = 0;
    for (double rate : rates) {
      step += 10;
      out << nlohmann::json{{"event", "step"},
                            {"epoch", 1},
                            {"step", step},
                            {"samples_per_second", rate},
                            {"ms_per_step",
                             {{"data", 1.0}, {"forward", 10.0}, {"backward", 20.0}, {"comm", 2.0}, {"optimizer", 1.0},
                              {"graph", 0.0}, {"checkpoint", 0.0}}}}
                 .dump()
          << "\n";
    }
    out << R"({"event":"epoch","epoch":1,"seconds":12.5,"test_accuracy":0.875})" << "\n";
    if (!end.empty())
      out << nlohmann::json{{"event", "end"},
                            {"reason", end},
                            {"steps", step},
                            {"comm", {{"comm_ms", 4.0}, {"exposed_ms", 1.0}, {"hidden_pct", 75.0}}}}
                 .dump()
          << "\n";
    return folder.string();
  }
  std::string file(const std::string& name, const std::string& text) {
    const fs::path p = dir_ / name;
    std::ofstream(p) << text;
    return p.string();
  }

  fs::path dir_;
};

TEST_F(ScalingReportTest, StrongScalingAgainstTheRunWithTheFewestRanks) {
  // Rates: the first record of each run is its warm-up (dropped), the median of the rest counts.
  const std::string four = run("n4", 4, 256, {100, 3000, 3200, 3100});
  const std::string one = run("n1", 1, 256, {50, 1000, 1010, 990});
  const std::string two = run("n2", 2, 256, {70, 1900, 1800});
  const ScalingReport r = make_scaling_report({summarize_run(four), summarize_run(one), summarize_run(two)});
  EXPECT_EQ(r.baseline, 1u);
  EXPECT_EQ(r.kind, "strong");
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  EXPECT_DOUBLE_EQ(r.runs[1].throughput, 1000);
  EXPECT_DOUBLE_EQ(r.runs[0].throughput, 3100);
  EXPECT_DOUBLE_EQ(r.runs[2].throughput, 1850);
  EXPECT_EQ(r.runs[0].records_used, 3);
  EXPECT_DOUBLE_EQ(r.speedup[0], 3.1);
  EXPECT_DOUBLE_EQ(r.efficiency[0], 3.1 / 4);
  EXPECT_DOUBLE_EQ(r.efficiency[2], 1.85 / 2);
  EXPECT_DOUBLE_EQ(r.efficiency[1], 1.0);

  const std::string table = render_scaling_report(r, "table");
  EXPECT_THAT(table, HasSubstr("small_cnn, fp32, cpu; strong scaling: global batch 256 in every run; baseline"));
  EXPECT_THAT(table, HasSubstr("77.5 %"));  // n4's efficiency
  EXPECT_THAT(table, HasSubstr("92.5 %"));  // n2's
  EXPECT_THAT(table, HasSubstr("(baseline)"));
  EXPECT_THAT(table, HasSubstr("82.58"));  // n4's step: 256 samples at 3100/s
  EXPECT_THAT(table, HasSubstr("75.0 %"));  // hidden communication
  EXPECT_THAT(table, HasSubstr("87.50 %"));  // accuracy
  EXPECT_THAT(table, Not(HasSubstr("graph")));  // no replayed steps: no column
  EXPECT_THAT(table, Not(HasSubstr("warning")));

  const nlohmann::json j = nlohmann::json::parse(render_scaling_report(r, "json"));
  EXPECT_EQ(j["kind"], "strong");
  EXPECT_EQ(j["baseline"], one);
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["runs"][0]["efficiency"].get<double>(), 0.775);
  EXPECT_EQ(j["runs"][0]["nodes"], 2);
  EXPECT_DOUBLE_EQ(j["runs"][0]["ms_per_step"]["backward"].get<double>(), 20.0);

  const std::string csv = render_scaling_report(r, "csv");
  EXPECT_THAT(csv, HasSubstr("run,ranks,nodes,batch/rank,samples/s,per rank,speedup,efficiency,step ms"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  const std::string md = render_scaling_report(r, "markdown");
  EXPECT_THAT(md, HasSubstr("| run | ranks | nodes |"));
  EXPECT_THAT(md, HasSubstr("| --- | ---: |"));
}

TEST_F(ScalingReportTest, WeakScalingAndANamedBaseline) {
  const std::string one = run("n1", 1, 64, {10, 500});
  const std::string two = run("n2", 2, 128, {10, 900});
  const ScalingReport r = make_scaling_report({summarize_run(one), summarize_run(two)}, two);
  EXPECT_EQ(r.kind, "weak");
  EXPECT_EQ(r.baseline, 1u);
  EXPECT_DOUBLE_EQ(r.speedup[0], 500.0 / 900.0);
  EXPECT_DOUBLE_EQ(r.efficiency[0], 500.0 / 900.0 * 2);
  EXPECT_THAT(render_scaling_report(r, "table"), HasSubstr("weak scaling: batch 64 per rank in every run"));
}

TEST_F(ScalingReportTest, UnlikeOrUnfinishedRunsAreReportedWithWarnings) {
  const std::string one = run("n1", 1, 64, {10, 500, 520});
  const std::string two = run("n2", 2, 64, {10, 900}, "bf16", "error");
  const std::string four = run("n4", 4, 32, {1700}, "fp32", "");
  const ScalingReport r = make_scaling_report({summarize_run(one), summarize_run(two), summarize_run(four)});
  EXPECT_EQ(r.kind, "mixed");
  const std::string text = render_scaling_report(r, "table");
  EXPECT_THAT(text, HasSubstr("warning: the runs' batches are neither one global batch"));
  EXPECT_THAT(text, HasSubstr("warning: the runs differ in precision (bf16, fp32)"));
  EXPECT_THAT(text, HasSubstr("warning: " + two + " ended with an error"));
  EXPECT_THAT(text, HasSubstr("warning: " + four + " has no end record"));
  EXPECT_THAT(text, HasSubstr("warning: " + four + " has only 1 step record(s), all warm-up"));
  EXPECT_DOUBLE_EQ(r.runs[2].throughput, 1700) << "all there is, said so";
  EXPECT_DOUBLE_EQ(r.runs[0].throughput, 510);
}

TEST_F(ScalingReportTest, ResumedRunsDropEachStartsWarmUp) {
  const std::string text =
      R"({"event":"start","model":"mlp","device":"cpu","world_size":1,"global_batch":32,"per_rank_batch":32})" "\n"
      R"({"event":"step","step":10,"samples_per_second":5})" "\n"
      R"({"event":"step","step":20,"samples_per_second":100})" "\n"
      R"({"event":"start","model":"mlp","device":"cpu","world_size":1,"global_batch":32,"per_rank_batch":32})" "\n"
      R"({"event":"resume","step":20})" "\n"
      R"({"event":"step","step":30,"samples_per_second":7})" "\n"
      R"({"event":"step","step":40,"samples_per_second":120})" "\n"
      R"({"event":"end","reason":"completed","steps":40})" "\n";
  const RunSummary s = summarize_run(file("resumed.jsonl", text));
  EXPECT_EQ(s.records_total, 4);
  EXPECT_EQ(s.records_used, 2);
  EXPECT_DOUBLE_EQ(s.throughput, 110);
  EXPECT_EQ(s.steps, 40);
  EXPECT_DOUBLE_EQ(summarize_run(file("resumed2.jsonl", text), 0).throughput, 53.5);
}

TEST_F(ScalingReportTest, InputsThatAreNotARunsMetricsAreClearErrors) {
  EXPECT_ERROR_CONTAINS(summarize_run((dir_ / "nothing").string()),
                        "scaling-report: cannot open '" + (dir_ / "nothing").string() + "': No such file or directory");
  fs::create_directories(dir_ / "empty_run");
  EXPECT_ERROR_CONTAINS(summarize_run((dir_ / "empty_run").string()), "is a folder without metrics.jsonl");
  const std::string bad = file("bad.jsonl", "{\"event\":\"start\",\"world_size\":1}\nnot json\n");
  EXPECT_ERROR_CONTAINS(summarize_run(bad), bad + " line 2: not a JSON object");
  const std::string no_start = file("no_start.jsonl", "{\"event\":\"step\",\"samples_per_second\":1}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(no_start), "line 1: a 'step' record before any 'start' record");
  const std::string no_steps = file("no_steps.jsonl", "{\"event\":\"start\",\"world_size\":2}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(no_steps), "has no step records");
  const std::string other = file("other.jsonl", "{\"loss\": 1}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(other), "a record without an \"event\"");
  const std::string one = run("n1", 1, 64, {10, 500});
  EXPECT_ERROR_CONTAINS(make_scaling_report({summarize_run(one)}, "elsewhere"),
                        "--baseline elsewhere is not one of the runs given");
  const std::string idle = run("idle", 1, 64, {0, 0});
  EXPECT_ERROR_CONTAINS(make_scaling_report({summarize_run(idle)}), "has a throughput of 0 samples/s");
  // Numbers a double cannot hold, and counts beyond any integer: errors naming the line.
  const std::string huge = file("huge.jsonl", "{\"event\":\"start\",\"world_size\":1}\n"
                                              "{\"event\":\"step\",\"samples_per_second\":1e400}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(huge), huge + " line 2: not a JSON object");
  const std::string ranks = file("ranks.jsonl", "{\"event\":\"start\",\"world_size\":1e300}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(ranks), ranks + " line 1: world_size 1e+300 is not a count");
  const std::string half = file("half.jsonl", "{\"event\":\"start\",\"world_size\":1,\"global_batch\":2.5}\n");
  EXPECT_ERROR_CONTAINS(summarize_run(half), half + " line 1: global_batch 2.5 is not a count");
}

// The phases come from the windows past the warm-up, as the throughput does: the epoch averages
// of the last record still hold the slow first window (and then added up to more than a step).
TEST_F(ScalingReportTest, PhasesLeaveOutTheWarmUpWindowsAsTheThroughputDoes) {
  auto step = [](int n, double rate, double window_forward, double epoch_forward) {
    return nlohmann::json{{"event", "step"}, {"epoch", 1}, {"step", n}, {"samples_per_second", rate},
                          {"ms_per_step", {{"forward", epoch_forward}, {"backward", 20.0}}},
                          {"window_ms_per_step", {{"forward", window_forward}, {"backward", 20.0}}}}
               .dump() + "\n";
  };
  const std::string text =
      R"({"event":"start","model":"mlp","device":"cpu","world_size":1,"global_batch":64,"per_rank_batch":64})" "\n" +
      step(10, 100, 100.0, 100.0) + step(20, 2000, 10.0, 55.0) + step(30, 2000, 12.0, 40.7);
  const RunSummary s = summarize_run(file("windows.jsonl", text));
  EXPECT_DOUBLE_EQ(s.throughput, 2000);
  EXPECT_DOUBLE_EQ(s.phases_ms.at("forward"), 11.0);  // the median of 10 and 12, not 40.7
  EXPECT_DOUBLE_EQ(s.phases_ms.at("backward"), 20.0);
  // A file from before the windows were written: the last record's epoch averages.
  std::string old_text = text;
  for (size_t at; (at = old_text.find("window_ms_per_step")) != std::string::npos;)
    old_text.replace(at, 18, "old_ms_per_step_xx");
  EXPECT_DOUBLE_EQ(summarize_run(file("old.jsonl", old_text)).phases_ms.at("forward"), 40.7);
}

// Runs whose batches are not recorded (token batching): the headline says that, not that the
// batches differ.
TEST_F(ScalingReportTest, UnknownBatchesAreSaidSoInTheHeadline) {
  auto text_run = [&](const std::string& name, int ranks) {
    return file(name, nlohmann::json{{"event", "start"}, {"model", "bert"}, {"device", "cpu"}, {"world_size", ranks},
                                     {"unit", "sequences"}}.dump() + "\n" +
                          R"({"event":"step","step":10,"samples_per_second":50})" "\n"
                          R"({"event":"step","step":20,"samples_per_second":100})" "\n");
  };
  const ScalingReport r = make_scaling_report({summarize_run(text_run("t1.jsonl", 1)),
                                               summarize_run(text_run("t2.jsonl", 2))});
  EXPECT_FALSE(r.batches_known);
  const std::string text = render_scaling_report(r, "table");
  EXPECT_THAT(text, HasSubstr("batches not known for every run"));
  EXPECT_THAT(text, Not(HasSubstr("batches differ between runs")));
}

TEST_F(ScalingReportTest, TheSubcommandPrintsOrExitsTwoNamingTheFile) {
  const std::string one = run("n1", 1, 64, {10, 500});
  const char* argv[] = {"dptrain", "scaling-report", one.c_str(), "--format", "csv", "--skip", "0"};
  const auto parsed = parse_cli(7, argv);
  ASSERT_TRUE(std::holds_alternative<CliArgs>(parsed));
  const CliArgs& args = std::get<CliArgs>(parsed);
  ASSERT_TRUE(args.scaling_report.has_value());
  EXPECT_EQ(args.scaling_report->runs, std::vector<std::string>{one});
  EXPECT_EQ(args.scaling_report->format, "csv");
  EXPECT_EQ(args.scaling_report->skip_records, 0);

  std::FILE* out = std::tmpfile();
  std::FILE* err = std::tmpfile();
  EXPECT_EQ(run_scaling_report(*args.scaling_report, out, err), 0);
  ScalingReportArgs missing;
  missing.runs = {one, (dir_ / "n9").string()};
  EXPECT_EQ(run_scaling_report(missing, out, err), 2);
  std::rewind(err);
  char buf[512] = {};
  ASSERT_NE(std::fgets(buf, sizeof buf, err), nullptr);
  EXPECT_THAT(std::string(buf), HasSubstr("dptrain: error: scaling-report: cannot open '" + (dir_ / "n9").string()));
  std::fclose(out);
  std::fclose(err);

  const char* bad_format[] = {"dptrain", "scaling-report", one.c_str(), "--format", "xml"};
  const auto refused = parse_cli(5, bad_format);
  ASSERT_TRUE(std::holds_alternative<int>(refused));
  EXPECT_EQ(std::get<int>(refused), 2);
}

}  // namespace
}  // namespace dp
