// The MLLOG writer: the exact line format, flushing, and the hyperparameter records a Config gives.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/expect_error.h"
#include "common/mllog_recipes.h"
#include "common/run_program.h"
#include "launch/config.h"
#include "launch/mllog.h"

namespace dp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(MllogWriter, LineFormatAndKeyOrder) {
  EXPECT_EQ(mllog_line(1700000000123, "POINT_IN_TIME", "eval_accuracy", 0.7612, "trainer.cpp", 412,
                       {{"epoch_num", 36}}),
            R"(:::MLLOG {"namespace": "", "time_ms": 1700000000123, "event_type": "POINT_IN_TIME", )"
            R"("key": "eval_accuracy", "value": 0.7612, )"
            R"("metadata": {"file": "trainer.cpp", "lineno": 412, "epoch_num": 36}})");
  // Metadata keeps the caller's order (not sorted), after file and lineno.
  EXPECT_EQ(mllog_line(5, "INTERVAL_START", "block_start", nullptr, "t.cpp", 1,
                       {{"first_epoch_num", 1}, {"epoch_count", 4}}),
            R"(:::MLLOG {"namespace": "", "time_ms": 5, "event_type": "INTERVAL_START", "key": "block_start", )"
            R"("value": null, "metadata": {"file": "t.cpp", "lineno": 1, "first_epoch_num": 1, "epoch_count": 4}})");
}

TEST(MllogWriter, EveryValueType) {
  auto value_of = [](const MlValue& v) {
    const std::string line = mllog_line(0, "POINT_IN_TIME", "k", v, "f", 0, {});
    const size_t at = line.find("\"value\": ");
    return line.substr(at + 9, line.find(", \"metadata\"") - at - 9);
  };
  EXPECT_EQ(value_of(nullptr), "null");
  EXPECT_EQ(value_of(true), "true");
  EXPECT_EQ(value_of(false), "false");
  EXPECT_EQ(value_of(-3), "-3");
  EXPECT_EQ(value_of(int64_t{1} << 40), "1099511627776");
  EXPECT_EQ(value_of(uint64_t{18446744073709551615u}), "18446744073709551615");  // a 64-bit seed
  EXPECT_EQ(value_of(2.0), "2.0");  // a float stays a float, as Python prints it
  EXPECT_EQ(value_of(1e-4), "0.0001");
  EXPECT_EQ(value_of(5e-05), "5e-05");
  EXPECT_EQ(value_of("closed"), R"("closed")");
  // Separators are spaced outside strings only; a string's own commas, colons and quotes stay.
  EXPECT_EQ(value_of(std::string("a,b: \"c\"\\")), R"("a,b: \"c\"\\")");
}

TEST(MllogWriter, WritesEachLineAtOnceWithTheInjectedClock) {
  const fs::path dir = testing::make_test_dir("mllog");
  int64_t now = 1700000000000;
  {
    MlLogger log((dir / "sub" / "mllog.txt").string(), [&] { return now; });
    ASSERT_TRUE(log.enabled());
    EXPECT_TRUE(log.kept_previous().empty());
    const int line = __LINE__ + 1;
    log.start("init_start");
    now += 250;
    log.event("seed", 7);
    now += 1;
    log.end("run_stop", nullptr, {{"status", "success"}});
    // Flushed per record: all three lines are in the file while the logger is still open.
    EXPECT_EQ(read_file(dir / "sub" / "mllog.txt"),
              mllog_line(1700000000000, "INTERVAL_START", "init_start", nullptr, "mllog_test.cpp", line, {}) + "\n" +
                  mllog_line(1700000000250, "POINT_IN_TIME", "seed", 7, "mllog_test.cpp", line + 2, {}) + "\n" +
                  mllog_line(1700000000251, "INTERVAL_END", "run_stop", nullptr, "mllog_test.cpp", line + 4,
                             {{"status", "success"}}) +
                  "\n");
  }
  // A second run's logger keeps the first file under another name instead of appending to it.
  MlLogger again((dir / "sub" / "mllog.txt").string(), [] { return int64_t{1}; });
  ASSERT_FALSE(again.kept_previous().empty());
  EXPECT_THAT(read_file(again.kept_previous()), HasSubstr("\"key\": \"run_stop\""));
  EXPECT_EQ(read_file(dir / "sub" / "mllog.txt"), "");
  fs::remove_all(dir);
}

TEST(MllogWriter, DisabledLoggerWritesNothing) {
  MlLogger off;
  EXPECT_FALSE(off.enabled());
  off.start("init_start");  // no file, no error
  off.event("eval_accuracy", 0.5, {{"epoch_num", 1}});
  // Moving an enabled logger hands over its file.
  const fs::path dir = testing::make_test_dir("mllog");
  MlLogger on((dir / "m.txt").string(), [] { return int64_t{3}; });
  off = std::move(on);
  EXPECT_TRUE(off.enabled());
  EXPECT_FALSE(on.enabled());  // the moved-from logger is disabled
  off.event("cache_clear", true);
  EXPECT_THAT(read_file(dir / "m.txt"), HasSubstr(R"("key": "cache_clear", "value": true)"));
  fs::remove_all(dir);
}

TEST(MllogWriter, RefusesADirectoryAsTheFile) {
  const fs::path dir = testing::make_test_dir("mllog");
  EXPECT_ERROR_CONTAINS(MlLogger(dir.string()), "logging.mllog: '" + dir.string() + "' is an existing directory, not a file");
  fs::remove_all(dir);
}

Config lars_config() { return testing::mllog_lars_config(); }

MlRunFacts imagenet_facts() {
  MlRunFacts f;
  f.steps_per_epoch = 401;  // ceil(1281167 / 3200)
  f.bn_span = 400;   // 8 ranks, BatchNorm per rank
  f.train_samples = 1281167;
  f.eval_samples = 50000;
  return f;
}

TEST(MllogHyperparameters, ResnetLars) {
  const std::vector<MlRecord> expected = {
      {"seed", uint64_t{42}},
      {"global_batch_size", int64_t{3200}},
      {"train_samples", int64_t{1281167}},
      {"eval_samples", int64_t{50000}},
      {"gradient_accumulation_steps", int64_t{1}},
      {"opt_name", "lars"},
      {"lars_opt_base_learning_rate", 11.0},
      {"lars_opt_end_learning_rate", 0.0001},
      {"lars_opt_learning_rate_decay_poly_power", 2.0},
      {"lars_opt_learning_rate_decay_steps", int64_t{37 * 401 - 802}},  // after the 2 warmup epochs
      {"lars_opt_learning_rate_warmup_epochs", 2.0},
      {"lars_opt_momentum", 0.9},
      {"lars_opt_weight_decay", 0.00005},
      {"lars_epsilon", 0.0},  // optimizer.eps's LARS default
      {"model_bn_span", int64_t{400}},
      {"label_smoothing", 0.1},
  };
  EXPECT_EQ(mllog_hyperparameters(MlBenchmark::kResnet, lars_config(), imagenet_facts()), expected);
}

TEST(MllogHyperparameters, ResnetSgd) {
  const Config c = testing::mllog_sgd_config();
  MlRunFacts f = imagenet_facts();
  f.steps_per_epoch = 626;
  f.bn_span = 256;
  const std::vector<MlRecord> expected = {
      {"seed", uint64_t{1}},
      {"global_batch_size", int64_t{2048}},
      {"train_samples", int64_t{1281167}},
      {"eval_samples", int64_t{50000}},
      {"gradient_accumulation_steps", int64_t{1}},
      {"opt_name", "sgd"},
      {"sgd_opt_base_learning_rate", 8.5},
      {"sgd_opt_end_learning_rate", 0.0001},
      {"sgd_opt_learning_rate_decay_poly_power", 2.0},
      {"sgd_opt_learning_rate_decay_steps", int64_t{41 * 626 - 5 * 626}},
      {"opt_learning_rate_warmup_epochs", 5.0},
      {"sgd_opt_momentum", 0.9},
      {"sgd_opt_weight_decay", 0.0002},
      {"model_bn_span", int64_t{256}},
      {"label_smoothing", 0.0},
  };
  EXPECT_EQ(mllog_hyperparameters(MlBenchmark::kResnet, c, f), expected);
}

TEST(MllogHyperparameters, BertLamb) {
  // NVIDIA's 8xA100 recipe: linear warmup then linear decay (schedule "linear": power 1, whatever
  // schedule.power says — at its default 2 here; another value is refused for linear).
  const Config c = config_from_yaml_string(R"(
run: {seed: 9, epochs: 2}
data: {batch_size: 448}
optimizer: {name: lamb, lr: 0.000425, betas: [0.9, 0.999], weight_decay: 0.01, eps: 0.000001}
schedule: {name: linear, warmup_epochs: 0.5}
)",
                                           "bert.yaml");
  MlRunFacts f;
  f.steps_per_epoch = 3350;
  f.bn_span = 56;
  f.train_samples = 1500000;
  f.eval_samples = 10000;
  const std::vector<MlRecord> expected = {
      {"seed", uint64_t{9}},
      {"global_batch_size", int64_t{448}},
      {"train_samples", int64_t{1500000}},
      {"eval_samples", int64_t{10000}},
      {"gradient_accumulation_steps", int64_t{1}},
      {"opt_name", "lamb"},
      {"opt_base_learning_rate", 0.000425},
      {"opt_lamb_epsilon", 0.000001},
      {"opt_lamb_beta_1", 0.9},
      {"opt_lamb_beta_2", 0.999},
      {"opt_lamb_weight_decay_rate", 0.01},
      {"opt_learning_rate_training_steps", int64_t{6700}},
      {"opt_learning_rate_warmup_steps", int64_t{1675}},
      {"num_warmup_steps", int64_t{1675}},
      {"start_warmup_step", int64_t{0}},
      {"opt_lamb_learning_rate_decay_poly_power", 1.0},  // "linear" ignores schedule.power
  };
  EXPECT_EQ(mllog_hyperparameters(MlBenchmark::kBert, c, f), expected);
}

// The rules' formula, floor(0.05 (230.23 B + 3e6) / 25e3) 25e3, worked by hand.
TEST(MllogHyperparameters, BertEvaluationInterval) {
  EXPECT_EQ(mlperf_bert_eval_interval(448), 150000);    // 0.05 x 3,103,143.04 = 155,157 -> 6 x 25,000
  EXPECT_EQ(mlperf_bert_eval_interval(1), 150000);      // the floor: 150,000 for any small batch
  EXPECT_EQ(mlperf_bert_eval_interval(4096), 175000);   // 197,151.1 -> 7
  EXPECT_EQ(mlperf_bert_eval_interval(8192), 225000);   // 244,302.2 -> 9
  EXPECT_EQ(mlperf_bert_eval_interval(10863), 275000);  // 275,049.4 -> 11, just past the step
  EXPECT_EQ(mlperf_bert_eval_interval(10858), 250000);  // 274,991.9 -> 10, just before it
  EXPECT_ERROR_CONTAINS(mlperf_bert_eval_interval(0), "must be positive");
}

TEST(MllogHyperparameters, RefusesWhatTheBenchmarkKeysCannotDescribe) {
  const MlRunFacts f = imagenet_facts();
  Config adamw = lars_config();
  adamw.optimizer.name = "adamw";
  EXPECT_ERROR_CONTAINS(mllog_hyperparameters(MlBenchmark::kResnet, adamw, f), "optimizer.name is 'adamw'");
  Config cosine = lars_config();
  cosine.schedule.name = "cosine";
  EXPECT_ERROR_CONTAINS(mllog_hyperparameters(MlBenchmark::kResnet, cosine, f),
                        "schedule.name must be poly or linear, got 'cosine'");
  EXPECT_ERROR_CONTAINS(mllog_hyperparameters(MlBenchmark::kBert, lars_config(), f), "optimizer.name is 'lars'");
  Config in_steps = lars_config();
  in_steps.schedule.warmup_epochs = 0;
  in_steps.schedule.warmup_steps = 500;
  EXPECT_ERROR_CONTAINS(mllog_hyperparameters(MlBenchmark::kResnet, in_steps, f),
                        "give it as schedule.warmup_epochs (schedule.warmup_steps is 500)");
  MlRunFacts no_steps = f;
  no_steps.steps_per_epoch = 0;
  EXPECT_ERROR_CONTAINS(mllog_hyperparameters(MlBenchmark::kResnet, lars_config(), no_steps), "steps_per_epoch");
  // Values that break the rules are logged as they are: the checker judges them.
  Config bad_wd = lars_config();
  bad_wd.optimizer.weight_decay = 3e-4;
  const std::vector<MlRecord> r = mllog_hyperparameters(MlBenchmark::kResnet, bad_wd, f);
  EXPECT_NE(std::find(r.begin(), r.end(), MlRecord{"lars_opt_weight_decay", 3e-4}), r.end());
}

TEST(MllogHyperparameters, SubmissionRecords) {
  MlSubmission s;
  s.org = "dptrain";
  s.platform = "1xH100";
  s.benchmark = MlBenchmark::kBert;
  const std::vector<MlRecord> expected = {{"submission_benchmark", "bert"},
                                          {"submission_division", "closed"},
                                          {"submission_org", "dptrain"},
                                          {"submission_platform", "1xH100"},
                                          {"submission_status", "onprem"}};
  EXPECT_EQ(mllog_submission_records(s), expected);
  EXPECT_EQ(parse_mllog_benchmark("resnet"), MlBenchmark::kResnet);
  EXPECT_ERROR_CONTAINS(parse_mllog_benchmark("gpt3"), "expected one of: resnet, bert");
}

// run_stop says success once any evaluation reached the benchmark's quality target (75.9 % for
// resnet), though the run, without run.target_accuracy, trains on and ends below it: here an MLP
// whose warm-up climbs to a learning rate it cannot take (78.6 % after epoch 1, 33.9 % at the end).
TEST(MllogRun, SuccessWhenAnEarlierEvaluationReachedTheTarget) {
  const fs::path dir = testing::make_test_dir("mllog_run");
  std::ofstream(dir / "c.yaml") << "run: {output_dir: " << (dir / "out").string() << ", threads: 1, epochs: 3}\n"
                                << "data: {batch_size: 1000, eval_batch_size: 5000}\n"
                                << "model: {name: mlp, mlp_hidden: [32]}\n"
                                << "optimizer: {name: sgd, lr: 1.2, momentum: 0.9}\n"
                                << "schedule: {name: poly, power: 1, warmup_epochs: 2.9, min_lr: 0}\n"
                                << "logging: {mllog: mllog.log}\n";
  const testing::ProgramResult r =
      testing::run_program(testing::dptrain_binary() + " --config " + (dir / "c.yaml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double first = testing::test_accuracy(r.output);
  const size_t last_epoch = r.output.find("epoch 3/3: ");
  ASSERT_NE(last_epoch, std::string::npos) << r.output;
  const double last = testing::test_accuracy(r.output.substr(last_epoch));
  ASSERT_GE(first, 75.9) << r.output;  // the premise: reached after epoch 1 ...
  ASSERT_LT(last, 75.9) << r.output;   // ... and lost by the end
  EXPECT_THAT(read_file(dir / "out" / "mllog.log"), HasSubstr("\"key\": \"run_stop\", \"value\": null, "));
  EXPECT_THAT(read_file(dir / "out" / "mllog.log"), HasSubstr("\"status\": \"success\"}}"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dp
