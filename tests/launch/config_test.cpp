#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/expect_error.h"
#include "launch/config.h"
#include "launch/mllog.h"
#include "runtime/core/error.h"

namespace dp {
namespace {

using ::testing::HasSubstr;

using testing::error_of;

std::string load_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  return error_of([&] { config_from_yaml_string(yaml, "test.yaml", overrides); });
}

TEST(Config, DefaultsFromAnEmptyDocument) {
  Config c = config_from_yaml_string("", "empty.yaml");
  EXPECT_EQ(c.model.name, "small_cnn");
  EXPECT_EQ(c.data.batch_size, 128);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_EQ(c.model.mlp_hidden, (std::vector<int64_t>{1024, 1024}));
  EXPECT_EQ(c.run.device, "cpu");
}

TEST(Config, ReadsEverySection) {
  Config c = config_from_yaml_string(R"(
run: {seed: 7, epochs: 3, device: "cuda:1", max_steps: 10}
data: {batch_size: 64, shuffle: false, loader_threads: 0}
model: {name: mlp, mlp_hidden: [512, 256], dropout: 0.25}
optimizer: {lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0001}
schedule: {name: step, step_epochs: [1, 2.5], gamma: 0.5}
loss: {label_smoothing: 0.1}
)", "t.yaml");
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.run.device, "cuda:1");
  EXPECT_EQ(c.data.batch_size, 64);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.model.mlp_hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_EQ(c.schedule.step_epochs, (std::vector<double>{1, 2.5}));
  EXPECT_DOUBLE_EQ(c.loss.label_smoothing, 0.1);
}

TEST(Config, ReadsTheDistributedAndDeterminismKeys) {
  Config c = config_from_yaml_string(R"(
run: {deterministic: true}
distributed: {bucket_mb: 4, timeout_s: 30, check_agreement: false, buffer_sync: average}
)", "t.yaml");
  EXPECT_TRUE(c.run.deterministic);
  EXPECT_DOUBLE_EQ(c.distributed.bucket_mb, 4);
  EXPECT_DOUBLE_EQ(c.distributed.timeout_s, 30);
  EXPECT_FALSE(c.distributed.check_agreement);
  EXPECT_EQ(c.distributed.buffer_sync, "average");
  const Config defaults = config_from_yaml_string("", "empty.yaml");
  EXPECT_FALSE(defaults.run.deterministic);
  EXPECT_DOUBLE_EQ(defaults.distributed.timeout_s, 300);
  EXPECT_TRUE(defaults.distributed.check_agreement);
  EXPECT_THAT(load_error("distributed:\n  timeout_s: -1\n"),
              HasSubstr("test.yaml:2: distributed.timeout_s: expected 0 (off) or a number of seconds in [1, 604800], got -1"));
}

TEST(Config, RejectsBadValuesNamingFileLineAndKey) {
  EXPECT_EQ(load_error("optimizer:\n  lr: -0.1\n"), "test.yaml:2: optimizer.lr: expected a positive number, got -0.1");
  EXPECT_THAT(load_error("data:\n  batch_size: 0\n"), HasSubstr("data.batch_size: expected an integer in [1, 16777216], got 0"));
  EXPECT_THAT(load_error("run:\n  epochs: three\n"), HasSubstr("run.epochs: expected an integer in [1, 100000], got 'three'"));
  EXPECT_THAT(load_error("run:\n  epochs: 1.5\n"), HasSubstr("run.epochs: expected an integer in [1, 100000], got '1.5'"));
  EXPECT_THAT(load_error("data:\n  shuffle: maybe\n"), HasSubstr("data.shuffle: expected true or false"));
  EXPECT_THAT(load_error("model:\n  name: vgg\n"),
              HasSubstr("model.name: unknown value 'vgg' (expected one of: small_cnn, mlp, resnet18, resnet34, "
                        "resnet50, resnet101, resnet152, bert)"));
  EXPECT_THAT(load_error("run:\n  device: gpu\n"), HasSubstr("run.device: expected cpu, cuda or cuda:N"));
  EXPECT_THAT(load_error("model:\n  mlp_hidden: [10, -1]\n"), HasSubstr("model.mlp_hidden[1]: expected an integer in [1, 1048576], got -1"));
  EXPECT_THAT(load_error("model:\n  mlp_hidden: 10\n"), HasSubstr("model.mlp_hidden: expected a list"));
  EXPECT_THAT(load_error("loss:\n  label_smoothing: 1.0\n"), HasSubstr("expected a number in [0, 1)"));
  EXPECT_THAT(load_error("run:\n  seed: -3\n"), HasSubstr("run.seed: expected a non-negative integer"));
  EXPECT_THAT(load_error("schedule:\n  name: step\n  step_epochs: [2, 1]\n"), HasSubstr("expected increasing values"));
}

TEST(Config, RejectsUnknownKeysAndSections) {
  EXPECT_THAT(load_error("optimizer:\n  lrr: 0.1\n"),
              HasSubstr("test.yaml:2: unknown key 'optimizer.lrr' (known keys in 'optimizer': name, lr, momentum"));
  EXPECT_THAT(load_error("optimiser:\n  lr: 0.1\n"),
              HasSubstr("test.yaml:1: unknown section 'optimiser' (known sections: run, data, model, optimizer"));
  EXPECT_THAT(load_error("- 1\n- 2\n"), HasSubstr("expected a mapping of sections"));
  EXPECT_THAT(load_error("run: 5\n"), HasSubstr("run: expected a mapping of keys"));
}

// A key of the optimizer section that the chosen optimiser does not read is a mistake, refused
// as an unknown key is, naming where it was set and who reads it; the resolved config prints the
// chosen optimiser's keys only, so it loads back.
TEST(Config, OptimizerKeysTheChosenOptimiserDoesNotReadAreRefused) {
  EXPECT_EQ(load_error("optimizer:\n  name: sgd\n  eta: 0.001\n"),
            "test.yaml:3: optimizer.eta: sgd does not use this key (only lars does); remove it or choose one of them. "
            "sgd reads: name, lr, weight_decay, clip_grad_norm, exclude_1d, exclude_names, momentum, dampening, nesterov");
  EXPECT_THAT(load_error("optimizer: {name: lars}\n", {"optimizer.betas=[0.9, 0.99]"}),
              HasSubstr("--set optimizer.betas=[0.9, 0.99]: optimizer.betas: lars does not use this key (only adamw, "
                        "lamb, shampoo do)"));
  EXPECT_THAT(load_error("optimizer: {name: adamw, momentum: 0.9}\n"), HasSubstr("optimizer.momentum: adamw does not"));
  EXPECT_THAT(load_error("optimizer: {name: lamb, grafting: adam}\n"), HasSubstr("only shampoo does"));
  // Each optimiser's own keys load, and every optimiser reads the common ones.
  EXPECT_NO_THROW(config_from_yaml_string("optimizer: {name: lars, eta: 0.002, momentum: 0.8, eps: 0, "
                                          "lr_outside_momentum: true, clip_grad_norm: 1}\n", "t.yaml"));
  EXPECT_NO_THROW(config_from_yaml_string("optimizer: {name: shampoo, betas: [0.9, 1], grafting: sgd}\n", "t.yaml"));
  const Config lars = config_from_yaml_string("optimizer: {name: lars, eta: 0.002}\n", "t.yaml");
  const std::string text = to_yaml(lars);
  EXPECT_THAT(text, HasSubstr("eta: 0.002"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("betas")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("nesterov")));
  EXPECT_TRUE(config_from_yaml_string(text, "resolved.yaml") == lars);
}

TEST(Config, WeightsFileIsInsideTheOutputDirAndNotTheMetricsFile) {
  EXPECT_EQ(config_from_yaml_string("", "t.yaml").run.weights_file, "model.safetensors");
  EXPECT_EQ(config_from_yaml_string("run: {weights_file: ''}", "t.yaml").run.weights_file, "");
  EXPECT_THAT(load_error("run: {weights_file: /tmp/w.safetensors}"), HasSubstr("run.weights_file: expected a file name "
                                                                                "relative to run.output_dir"));
  EXPECT_THAT(load_error("run: {weights_file: ../w.safetensors}"), HasSubstr("without '.' or '..'"));
  EXPECT_THAT(load_error("run: {weights_file: metrics.jsonl}"), HasSubstr("run.weights_file: 'metrics.jsonl' is "
                                                                          "run.metrics_file too"));
}

// The run's output files: one would otherwise overwrite another, move it aside as an earlier run's
// (an MLLOG named metrics.jsonl), or fail only when written, after training.
TEST(Config, OutputFilesAreDistinctDoNotNestAndStayOutOfCheckpoints) {
  EXPECT_EQ(load_error("logging: {mllog: metrics.jsonl}"),
            "test.yaml:1: logging.mllog: 'metrics.jsonl' is run.metrics_file too: choose another name (or empty for "
            "none)");
  EXPECT_THAT(load_error("logging: {mllog: ./out/../model.safetensors}"),
              HasSubstr("without '.' or '..'"));
  EXPECT_THAT(load_error("run: {weights_file: w.safetensors}\nlogging: {mllog: w.safetensors}"),
              HasSubstr("logging.mllog: 'w.safetensors' is run.weights_file too"));
  EXPECT_THAT(load_error("run: {weights_file: logs//w.safetensors, metrics_file: logs/w.safetensors}"),
              HasSubstr("run.weights_file: 'logs//w.safetensors' is run.metrics_file too"));
  EXPECT_THAT(load_error("run: {metrics_file: checkpoints}"),
              HasSubstr("run.metrics_file: 'checkpoints' would be run.output_dir/checkpoints or in it"));
  EXPECT_THAT(load_error("", {"run.weights_file=checkpoints/w.safetensors"}),
              HasSubstr("--set run.weights_file=checkpoints/w.safetensors: run.weights_file: "));
  EXPECT_THAT(load_error("run: {metrics_file: logs, weights_file: logs/w.safetensors}"),
              HasSubstr("run.weights_file: 'logs/w.safetensors' and run.metrics_file 'logs': one would be a folder "
                        "holding the other"));
  EXPECT_EQ(load_error("run: {metrics_file: logs/m.jsonl, weights_file: logs/w.safetensors}\n"
                       "logging: {mllog: logs/mllog.txt}"),
            "");
}

TEST(Config, CrossFieldRules) {
  EXPECT_THAT(load_error("optimizer: {momentum: 0, nesterov: true}"),
              HasSubstr("optimizer.nesterov: nesterov needs momentum > 0 and dampening 0"));
  EXPECT_THAT(load_error("schedule: {name: step}"), HasSubstr("schedule.step_epochs: the step schedule needs"));
  // A rule about a key names where that key was set: its --set, or its line in the file.
  EXPECT_EQ(load_error("optimizer:\n  name: adamw\n  lr: 0.001\n", {"optimizer.betas=[0.9, 1]"}),
            "--set optimizer.betas=[0.9, 1]: optimizer.betas: adamw needs beta2 in [0, 1) (only shampoo takes 1), got 1");
  EXPECT_THAT(load_error("optimizer:\n  name: adamw\n  betas: [0.9, 1]\n"),
              HasSubstr("test.yaml:3: optimizer.betas: adamw needs beta2"));
}

// Schedule and model keys the chosen schedule or model does not read: set away from their
// defaults they would be ignored (gamma and step_epochs without `name: step` leave the learning
// rate constant), so they are refused; at their defaults (what --print-config writes) they pass.
TEST(Config, ScheduleAndModelKeysTheChoiceDoesNotReadAreRefusedUnlessAtTheirDefault) {
  EXPECT_EQ(load_error("schedule:\n  step_epochs: [0.5]\n  gamma: 0.01\n"),
            "test.yaml:2: schedule.step_epochs: the constant schedule does not read it (only step does); remove it, "
            "or set schedule.name to step");
  EXPECT_THAT(load_error("schedule: {name: step, step_epochs: [1], power: 3}"),
              HasSubstr("schedule.power: the step schedule does not read it (only poly does)"));
  EXPECT_THAT(load_error("schedule: {name: constant}", {"schedule.total_steps=100"}),
              HasSubstr("--set schedule.total_steps=100: schedule.total_steps: the constant schedule does not read it "
                        "(only cosine, poly, linear do); remove it, or set schedule.name to one of cosine, poly, linear"));
  EXPECT_THAT(load_error("model: {name: small_cnn, mlp_hidden: [64]}"),
              HasSubstr("model.mlp_hidden: the small_cnn model does not read it (only mlp does)"));
  EXPECT_THAT(load_error("model: {name: resnet18, size: large}"),
              HasSubstr("model.size: the resnet18 model does not read it (only bert does)"));
  EXPECT_EQ(load_error("schedule: {name: cosine, gamma: 0.1, power: 2, step_epochs: []}\nmodel: {name: mlp, size: tiny}"),
            "");
  EXPECT_EQ(load_error("schedule: {name: poly, power: 0.5, min_lr: 0.001, total_steps: 100}"), "");
  // --print-config's output loads back for every schedule and model.
  for (const char* schedule : {"constant", "step", "cosine", "poly", "linear"})
    for (const char* model : {"small_cnn", "mlp", "resnet50", "bert"}) {
      const Config c = config_from_yaml_string(std::string("schedule: {name: ") + schedule + (std::string(schedule) == "step" ? ", step_epochs: [1]" : "") +
                                                   "}\nmodel: {name: " + model + "}",
                                               "t.yaml");
      EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << schedule << " " << model;
    }
}

TEST(Config, AMinimumLearningRateAboveTheLearningRateIsRefusedAtLoad) {
  EXPECT_EQ(load_error("optimizer: {lr: 0.05}\nschedule:\n  name: cosine\n  min_lr: 10\n"),
            "test.yaml:4: schedule.min_lr: expected at most optimizer.lr (0.05): the cosine schedule decays from "
            "optimizer.lr to min_lr, got 10");
  EXPECT_EQ(load_error("optimizer: {lr: 0.05}\nschedule: {name: linear, min_lr: 0.05}"), "");
}

// YAML 1.1 reads 064 as octal 52 (and refuses 0128); a recipe's integers are decimal.
TEST(Config, IntegersWithALeadingZeroAreRefused) {
  EXPECT_EQ(load_error("data: {batch_size: 064}"),
            "test.yaml:1: data.batch_size: expected an integer in [1, 16777216], got '064': YAML reads a leading 0 as "
            "an octal number; write 64");
  EXPECT_THAT(load_error("data: {batch_size: 0128}"), HasSubstr("got '0128': YAML reads a leading 0"));
  EXPECT_THAT(load_error("", {"run.seed=007"}), HasSubstr("run.seed: expected a non-negative integer, got '007'"));
  EXPECT_THAT(load_error("run: {epochs: 00}"), HasSubstr("write 0"));
  EXPECT_EQ(config_from_yaml_string("run: {seed: 0, epochs: 10}", "t.yaml").run.seed, 0u);
  EXPECT_EQ(config_from_yaml_string("run: {seed: 0x10}", "t.yaml").run.seed, 16u);  // hex says what it is
  EXPECT_EQ(config_from_yaml_string("optimizer: {lr: 0.05}", "t.yaml").optimizer.lr, 0.05);
}

// yaml-cpp's Load reads the first document and drops the rest.
TEST(Config, ASecondYamlDocumentIsRefused) {
  EXPECT_EQ(load_error("run: {epochs: 1}\n---\noptimizer: {lr: 999}\n"),
            "test.yaml:2: a second YAML document begins here: a recipe is one document, and the rest would be "
            "ignored; merge them or remove the '---'");
  EXPECT_THAT(load_error("# recipe\n%YAML 1.2\n---\nrun: {epochs: 1}\n...\n--- {optimizer: {lr: 9}}\n"),
              HasSubstr("test.yaml:5: a second YAML document begins here"));
  EXPECT_THAT(load_error("run: {epochs: 1}\n--- # comment\n\noptimizer: {lr: 9}\n"), HasSubstr("test.yaml:2: a second"));
  EXPECT_EQ(config_from_yaml_string("---\nrun: {epochs: 2}\n", "t.yaml").run.epochs, 2);
  EXPECT_EQ(config_from_yaml_string("%YAML 1.2\n---\nrun: {epochs: 2}\n", "t.yaml").run.epochs, 2);
  EXPECT_EQ(config_from_yaml_string("run: {epochs: 2}\n---\n# nothing more\n", "t.yaml").run.epochs, 2);
  EXPECT_EQ(config_from_yaml_string("run: {epochs: 2}\n...\n", "t.yaml").run.epochs, 2);
  EXPECT_EQ(config_from_yaml_string("run: {name: '---x'}\n", "t.yaml").run.name, "---x");
}

TEST(Config, MalformedYamlGivesLine) {
  EXPECT_THAT(load_error("run:\n  epochs: [1, 2\n  seed: 3\n"), HasSubstr("test.yaml:"));
  EXPECT_THAT(load_error("run:\n  epochs: [1, 2\n  seed: 3\n"), HasSubstr("malformed YAML"));
}

TEST(Config, MissingFile) {
  EXPECT_EQ(error_of([] { load_config("/nonexistent/x.yaml"); }),
            "cannot open config file '/nonexistent/x.yaml': No such file or directory");
}

TEST(Config, Overrides) {
  Config c = config_from_yaml_string("optimizer: {lr: 0.1}\nmodel: {name: mlp}", "t.yaml",
                                     {"optimizer.lr=0.2", "model.mlp_hidden=[512,256]", "run.device=cuda"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);
  EXPECT_EQ(c.model.mlp_hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(c.run.device, "cuda");
  EXPECT_THAT(load_error("", {"optimizer.lrr=0.1"}),
              HasSubstr("--set optimizer.lrr=0.1: unknown key 'optimizer.lrr' (known keys in 'optimizer'"));
  EXPECT_EQ(load_error("", {"optimizer.lr=-1"}), "--set optimizer.lr=-1: optimizer.lr: expected a positive number, got -1");
  EXPECT_THAT(load_error("", {"optimizer"}), HasSubstr("--set optimizer: expected section.key=value"));
  EXPECT_THAT(load_error("", {"foo.bar=1"}), HasSubstr("unknown section 'foo'"));
  // `~` takes a key out of the recipe: an SGD recipe's momentum does not stop a switch to AdamW.
  const std::string sgd = "optimizer: {name: sgd, lr: 0.1, momentum: 0.9}";
  EXPECT_THAT(load_error(sgd, {"optimizer.name=adamw"}), HasSubstr("optimizer.momentum: adamw does not use this key"));
  const Config adamw = config_from_yaml_string(sgd, "t.yaml", {"optimizer.name=adamw", "optimizer.momentum=~"});
  EXPECT_EQ(adamw.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(adamw.optimizer.momentum, Config{}.optimizer.momentum);
  EXPECT_DOUBLE_EQ(config_from_yaml_string("optimizer: {lr: 0.3}", "t.yaml", {"optimizer.lr=~"}).optimizer.lr,
                   Config{}.optimizer.lr);
  // An empty value is a value: an empty file name turns the weights file off.
  EXPECT_EQ(config_from_yaml_string("", "t.yaml", {"run.weights_file="}).run.weights_file, "");
  EXPECT_EQ(config_from_yaml_string("run: {weights_file: w.st}", "t.yaml", {"run.weights_file=null"}).run.weights_file,
            Config{}.run.weights_file);
}

TEST(Config, ResolvedYamlRoundTrips) {
  Config c = config_from_yaml_string(R"(
run: {name: "x y", seed: 18446744073709551615, device: "cuda:0"}
model: {name: mlp, mlp_hidden: [3, 5]}
optimizer: {lr: 0.1, weight_decay: 0.00005}
schedule: {name: step, step_epochs: [1.5, 3]}
)", "t.yaml");
  std::string text = to_yaml(c);
  EXPECT_THAT(text, HasSubstr("lr: 0.1\n"));
  EXPECT_THAT(text, HasSubstr("weight_decay: 5e-05"));
  Config back = config_from_yaml_string(text, "resolved.yaml");
  EXPECT_TRUE(back == c) << text;
  EXPECT_EQ(back.run.seed, 18446744073709551615ull);
  EXPECT_EQ(to_yaml(back), text);
}

TEST(Config, ShippedRecipesLoad) {
  const std::filesystem::path dir = std::filesystem::path(DPTRAIN_SOURCE_DIR) / "configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    EXPECT_NO_THROW(load_config(entry.path().string()));
    ++loaded;
  }
  EXPECT_GE(loaded, 3);
  // The MLPerf BERT phase-2 recipe: its evaluation interval is the rules' formula for its batch.
  const Config bert = load_config((dir / "bert_large.yaml").string());
  EXPECT_EQ(bert.run.eval_every_samples, mlperf_bert_eval_interval(bert.data.batch_size));
  EXPECT_EQ(bert.data.batch_size, 448);
  EXPECT_EQ(bert.data.max_predictions, 76);
  EXPECT_EQ(schedule_steps(bert, 1).total, 6700);
  EXPECT_FALSE(bert.schedule.count_skipped_steps);
  EXPECT_DOUBLE_EQ(bert.loss_scale.init_scale, 1048576.0);
  Config c = load_config((dir / "fashion_mnist.yaml").string());
  EXPECT_EQ(c.model.name, "small_cnn");
  EXPECT_EQ(c.run.epochs, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.data.batch_size, 128);
}

// NOTE [ A schedule that does not fit its run ]: a decaying schedule whose warmup leaves nothing to
// decay is refused naming the keys; a constant or step schedule trains on and says what it will
// not do; run.max_steps is not the schedule's end.
TEST(Config, ASchedulesWarmupAndMilestonesAreCheckedAgainstItsLength) {
  auto fits = [](const std::string& schedule, int64_t steps_per_epoch) {
    return check_schedule_fits(config_from_yaml_string("run: {epochs: 3, max_steps: 5}\nschedule: " + schedule,
                                                       "test.yaml"),
                               steps_per_epoch);
  };
  for (const char* name : {"cosine", "poly", "linear"}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(fits(std::string("{name: ") + name + ", warmup_epochs: 2.9}", 100).empty());
    EXPECT_ERROR_CONTAINS(fits(std::string("{name: ") + name + ", warmup_epochs: 3}", 100),
                          std::string("schedule.warmup_epochs (3 = 300 steps) must end before the ") + name +
                              " schedule does at run.epochs (3 x 100 steps = 300): shorten the warmup or lengthen "
                              "the run");
    EXPECT_ERROR_CONTAINS(fits(std::string("{name: ") + name + ", warmup_steps: 50, total_steps: 50}", 100),
                          "schedule.warmup_steps (50) must end before the " + std::string(name) +
                              " schedule does at schedule.total_steps (50)");
  }
  EXPECT_TRUE(fits("{name: constant, warmup_epochs: 2.99}", 100).empty());
  // schedule.total_steps ends decays only (constant and step refuse it at load, and run to the
  // run's end).
  EXPECT_TRUE(fits("{name: constant, warmup_steps: 50}", 100).empty());
  EXPECT_TRUE(fits("{name: step, step_epochs: [2.5]}", 100).empty());
  EXPECT_THAT(fits("{name: constant, warmup_steps: 300}", 100),
              ::testing::ElementsAre("schedule.warmup_steps (300) outlasts the schedule, which ends at run.epochs (3 x "
                                     "100 steps = 300): the learning rate stays below optimizer.lr (0.05)"));
  EXPECT_TRUE(fits("{name: step, step_epochs: [1, 2.99]}", 100).empty());
  EXPECT_THAT(fits("{name: step, step_epochs: [1, 3, 4]}", 100),
              ::testing::ElementsAre(HasSubstr("the decay at epoch 3 (step 300) comes after the schedule ends at "
                                               "run.epochs (3 x 100 steps = 300): it never happens"),
                                     HasSubstr("the decay at epoch 4 (step 400)")));
  // The shipped recipes fit their runs (ImageNet's 1,281,167 images at their batch sizes; the
  // small recipes at Fashion-MNIST's 469 steps of 128).
  const std::filesystem::path dir = std::filesystem::path(DPTRAIN_SOURCE_DIR) / "configs";
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Config c = load_config(entry.path().string());
    const int64_t steps_per_epoch = c.data.dataset == "image_folder" ? 1281167 / c.data.batch_size : 469;
    // (Not gmock's IsEmpty(): the tests link GoogleTest without libgmock, whose
    // FormatMatcherDescription it calls; an optimised build drops the call, the sanitizer build not.)
    const std::vector<std::string> warnings = check_schedule_fits(c, steps_per_epoch);
    EXPECT_TRUE(warnings.empty()) << warnings.front();
  }
}

// Issue 10, class 6: shapes yaml-cpp accepts but a recipe must not have.
TEST(Config, DuplicatedKeysAndSectionsAreRefusedNamingBothLines) {
  EXPECT_EQ(load_error("optimizer:\n  lr: 0.1\n  lr: 0.2\n"),
            "test.yaml:3: optimizer.lr: given twice (first at line 2); keep one");
  EXPECT_EQ(load_error("run: {epochs: 2}\noptimizer: {lr: 0.1}\nrun: {seed: 3}\n"),
            "test.yaml:3: run: given twice (first at line 1); keep one");
  // Also when --set would touch the duplicated key: the file is checked first.
  EXPECT_THAT(load_error("data:\n  batch_size: 8\n  batch_size: 16\n", {"data.batch_size=32"}),
              HasSubstr("test.yaml:3: data.batch_size: given twice"));
}

TEST(Config, ComplexKeysAreAnErrorWithFileAndLine) {
  EXPECT_EQ(load_error("? [a, b]\n: 1\n"), "test.yaml:1: the configuration: expected a key name, got a list as a key");
  EXPECT_EQ(load_error("run:\n  ? {x: 1}\n  : 2\n"), "test.yaml:2: run: expected a key name, got a mapping as a key");
}

TEST(Config, WrongShapesAreReportedEvenWithOverrides) {
  // Before: a list or scalar root was silently replaced by the --set values.
  EXPECT_THAT(load_error("- 1\n- 2\n", {"optimizer.lr=0.1"}),
              HasSubstr("test.yaml:1: expected a mapping of sections (run, data, model"));
  EXPECT_THAT(load_error("just text\n", {"run.epochs=1"}), HasSubstr("test.yaml:1: expected a mapping of sections"));
  // Before: `run: 5` plus --set run.x ended in "unexpected error: <yaml-cpp text>".
  EXPECT_THAT(load_error("run: 5\n", {"run.epochs=2"}), HasSubstr("test.yaml:1: run: expected a mapping of keys (name, seed"));
  EXPECT_THAT(load_error("optimizer: [1, 2]\n", {"optimizer.lr=0.1"}),
              HasSubstr("test.yaml:1: optimizer: expected a mapping of keys"));
  // An empty section stays valid, with or without an override into it.
  EXPECT_DOUBLE_EQ(config_from_yaml_string("optimizer:\n", "t.yaml", {"optimizer.lr=0.2"}).optimizer.lr, 0.2);
}

TEST(Config, ADirectoryIsNotAConfigFile) {
  const std::string dir = ::testing::TempDir();
  EXPECT_THAT(error_of([&] { load_config(dir); }), HasSubstr("is a directory; give the recipe's YAML file"));
}

TEST(Config, AnOversizedFileIsRefused) {
  const std::filesystem::path p = std::filesystem::path(::testing::TempDir()) / "dptrain_config_test_big.yaml";
  {
    std::ofstream out(p, std::ios::binary);
    const std::string line = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 1100; ++i) out << line;
  }
  EXPECT_THAT(error_of([&] { load_config(p.string()); }), HasSubstr("is larger than 1 MiB"));
  std::filesystem::remove(p);
}

// Issue 10, class 3: every count has a documented upper bound, checked at load.
TEST(Config, CountsHaveUpperBounds) {
  EXPECT_EQ(load_error("run: {epochs: 100001}"), "test.yaml:1: run.epochs: expected an integer in [1, 100000], got 100001");
  EXPECT_THAT(load_error("run: {threads: 5000}"), HasSubstr("run.threads: expected an integer in [1, 1024], got 5000"));
  EXPECT_THAT(load_error("data: {prefetch: 1000000}"), HasSubstr("data.prefetch: expected an integer in [1, 64]"));
  EXPECT_THAT(load_error("data: {loader_threads: 100000}"),
              HasSubstr("data.loader_threads: expected an integer in [0, 256]"));
  EXPECT_THAT(load_error("data: {batch_size: 9223372036854775807}"),
              HasSubstr("data.batch_size: expected an integer in [1, 16777216], got 9223372036854775807"));
  // Beyond int64: the text is shown as written, not a wrapped number.
  EXPECT_THAT(load_error("data: {eval_batch_size: 99999999999999999999}"),
              HasSubstr("data.eval_batch_size: expected an integer in [1, 16777216], got '99999999999999999999'"));
  EXPECT_THAT(load_error("model: {num_classes: 2000000}"), HasSubstr("model.num_classes: expected an integer in [1, 1000000]"));
  EXPECT_THAT(load_error("run: {max_skipped_steps: 0}"), HasSubstr("run.max_skipped_steps: expected an integer in [1, 1000000]"));
  EXPECT_THAT(load_error("distributed: {bucket_mb: 1e9}"), HasSubstr("distributed.bucket_mb: expected a number in (0, 65536]"));
  EXPECT_THAT(load_error("schedule: {warmup_epochs: .inf}"), HasSubstr("schedule.warmup_epochs: expected a number in [0, 100000]"));
  EXPECT_THAT(load_error("data: {mean: .nan}"), HasSubstr("data.mean: expected a finite number"));
  EXPECT_THAT(load_error("model: {mlp_hidden: [" + [] {
                std::string s;
                for (int i = 0; i < 300; ++i) s += (i ? ", " : "") + std::string("4");
                return s;
              }() + "]}"),
              HasSubstr("model.mlp_hidden: expected at most 256 values, got 300"));
  // The bounds themselves are valid.
  const Config c = config_from_yaml_string("run: {epochs: 100000, threads: 1024}\ndata: {prefetch: 64, batch_size: 16777216}",
                                           "t.yaml");
  EXPECT_EQ(c.run.epochs, 100000);
  EXPECT_EQ(c.data.batch_size, 16777216);
  EXPECT_EQ(config_from_yaml_string("", "t.yaml").run.max_skipped_steps, 10);
}

TEST(Config, DeviceIndexIsBounded) {
  EXPECT_EQ(config_from_yaml_string("run: {device: 'cuda:1023'}", "t.yaml").run.device, "cuda:1023");
  for (const char* bad : {"cuda:1024", "cuda:99999999999", "cuda:-1", "cuda:01", "cuda:", "cuda:+1", "cuda: 1"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(load_error(std::string("run: {device: '") + bad + "'}"),
                HasSubstr("run.device: expected cpu, cuda or cuda:N with N in [0, 1023]"));
  }
}

// Issue 10, class 4: the watchdog's timeout either works or is refused.
TEST(Config, WatchdogTimeoutRange) {
  EXPECT_DOUBLE_EQ(config_from_yaml_string("distributed: {timeout_s: 0}", "t.yaml").distributed.timeout_s, 0);
  EXPECT_DOUBLE_EQ(config_from_yaml_string("distributed: {timeout_s: 1}", "t.yaml").distributed.timeout_s, 1);
  EXPECT_DOUBLE_EQ(config_from_yaml_string("distributed: {timeout_s: 604800}", "t.yaml").distributed.timeout_s, 604800);
  for (const char* bad : {"0.001", "0.5", "604801", "1e300", ".inf", ".nan", "-5"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(load_error(std::string("distributed: {timeout_s: ") + bad + "}"),
                HasSubstr("distributed.timeout_s: expected 0 (off) or a number of seconds in [1, 604800]"));
  }
}

// Issue 10, class 1: the metrics file is a file inside run.output_dir.
TEST(Config, MetricsFileStaysInsideTheOutputDir) {
  EXPECT_EQ(config_from_yaml_string("run: {metrics_file: logs/m.jsonl}", "t.yaml").run.metrics_file, "logs/m.jsonl");
  EXPECT_THAT(load_error("run: {metrics_file: /etc/passwd}"),
              HasSubstr("run.metrics_file: expected a file name relative to run.output_dir (like metrics.jsonl), got "
                        "'/etc/passwd'"));
  EXPECT_THAT(load_error("run: {metrics_file: ../x.jsonl}"), HasSubstr("without '.' or '..'"));
  EXPECT_THAT(load_error("run: {metrics_file: a/../../x.jsonl}"), HasSubstr("without '.' or '..'"));
  EXPECT_THAT(load_error("run: {metrics_file: logs/}"), HasSubstr("expected a file name relative to run.output_dir"));
  EXPECT_THAT(load_error("run: {metrics_file: ''}"), HasSubstr("expected a file name relative to run.output_dir"));
}

// Found by tests/fuzz/fuzz_config's round trip: -.inf passed the "finite number" check, and the
// resolved YAML (mean: -inf) did not load back.
TEST(Config, MeanMustBeFinite) {
  for (const char* value : {"-.inf", ".inf", "-.Inf", ".nan"}) {
    EXPECT_THAT(load_error(std::string("data: {mean: ") + value + "}"),
                HasSubstr("test.yaml:1: data.mean: expected a finite number, got "))
        << value;
  }
  EXPECT_THAT(load_error("", {"data.mean=-.inf"}), HasSubstr("--set data.mean=-.inf: data.mean: expected a finite number"));
  const Config c = config_from_yaml_string("data: {mean: -1e308}", "t.yaml");
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
}

// Found by tests/fuzz/fuzz_config's round trip: yaml-cpp writes a string that ends in a CR
// unquoted, so a run named "exp\r" came back from the resolved YAML as an empty value. String
// values are one line of printable text.
TEST(Config, StringValuesRefuseControlCharacters) {
  EXPECT_EQ(load_error(R"(run: {name: "exp\r"})"),
            "test.yaml:1: run.name: expected a string without control characters, got one with byte 0x0D");
  EXPECT_EQ(load_error("", {R"(run.output_dir="runs/a\nb")"}),
            R"(--set run.output_dir="runs/a\nb": run.output_dir: expected a string without control characters, )"
            "got one with byte 0x0A");
  EXPECT_THAT(load_error(R"(run: {metrics_file: "m\0.jsonl"})"),
              HasSubstr("run.metrics_file: expected a file name without control characters, got one with byte 0x00"));
  EXPECT_THAT(load_error(R"(optimizer: {exclude_names: ["bn\t"]})"),
              HasSubstr("optimizer.exclude_names[0]: expected a string without control characters"));
  EXPECT_THAT(load_error(R"(data: {root: "/data\x7f"})"), HasSubstr("data.root: expected a string without control"));
  // Other text, non-ASCII included, still loads and round-trips.
  const Config c = config_from_yaml_string(R"(run: {name: "Lauf ü ✓ 'q' \"dq\" #1: x", output_dir: " runs/sp "})", "t.yaml");
  EXPECT_EQ(c.run.name, "Lauf ü ✓ 'q' \"dq\" #1: x");
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
}

TEST(Config, LossScaleKeysHaveTheirRanges) {
  const Config d = config_from_yaml_string("", "t.yaml");
  EXPECT_FALSE(d.loss_scale.enabled.has_value());
  EXPECT_FALSE(d.loss_scaling());
  EXPECT_EQ(d.loss_scale.init_scale, 65536.0);
  EXPECT_EQ(d.loss_scale.growth_factor, 2.0);
  EXPECT_EQ(d.loss_scale.backoff_factor, 0.5);
  EXPECT_EQ(d.loss_scale.growth_interval, 2000);
  EXPECT_THAT(load_error("loss_scale: {init_scale: 0}"), HasSubstr("loss_scale.init_scale: expected a positive number up to 3.4e38"));
  EXPECT_THAT(load_error("loss_scale: {init_scale: 1e39}"), HasSubstr("loss_scale.init_scale: expected a positive number up to 3.4e38"));
  EXPECT_THAT(load_error("loss_scale: {growth_factor: 1}"), HasSubstr("loss_scale.growth_factor: expected a number in (1, 65536]"));
  EXPECT_THAT(load_error("loss_scale: {backoff_factor: 1}"), HasSubstr("loss_scale.backoff_factor: expected a number in (0, 1)"));
  EXPECT_THAT(load_error("loss_scale: {backoff_factor: 0}"), HasSubstr("loss_scale.backoff_factor: expected a number in (0, 1)"));
  EXPECT_THAT(load_error("loss_scale: {growth_interval: 0}"), HasSubstr("loss_scale.growth_interval: expected an integer in [1, 2147483647]"));
  EXPECT_THAT(load_error("loss_scale: {enable: true}"), HasSubstr("loss_scale"));
  const Config c = config_from_yaml_string(
      "loss_scale: {enabled: true, init_scale: 1024, growth_factor: 4, backoff_factor: 0.25, growth_interval: 7}", "t.yaml");
  EXPECT_TRUE(c.loss_scaling());
  EXPECT_EQ(c.loss_scale.growth_interval, 7);
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
}

// run.precision: the three names, and loss scaling on by default exactly for fp16 (PyTorch
// AMP's recipe: bf16 has float32's range and needs none), overridable both ways.
TEST(Config, PrecisionNamesAndTheLossScalingDefault) {
  EXPECT_EQ(config_from_yaml_string("", "t.yaml").run.precision, "fp32");
  EXPECT_THAT(load_error("run: {precision: fp8}"), HasSubstr("run.precision: unknown value 'fp8' (expected one of: fp32, bf16, fp16)"));
  EXPECT_FALSE(config_from_yaml_string("run: {precision: bf16}", "t.yaml").loss_scaling());
  EXPECT_TRUE(config_from_yaml_string("run: {precision: fp16}", "t.yaml").loss_scaling());
  EXPECT_FALSE(config_from_yaml_string("run: {precision: fp16}\nloss_scale: {enabled: false}", "t.yaml").loss_scaling());
  EXPECT_TRUE(config_from_yaml_string("run: {precision: bf16}\nloss_scale: {enabled: true}", "t.yaml").loss_scaling());
  EXPECT_EQ(autocast_dtype_of("fp32"), kFloat32);
  EXPECT_EQ(autocast_dtype_of("bf16"), kBFloat16);
  EXPECT_EQ(autocast_dtype_of("fp16"), kFloat16);
  const Config c = config_from_yaml_string("run: {precision: fp16}", "t.yaml");
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
}

TEST(Config, GradientWireDtype) {
  EXPECT_EQ(config_from_yaml_string("", "t.yaml").distributed.grad_dtype, "fp32");
  const Config c = config_from_yaml_string("distributed: {grad_dtype: bf16}", "t.yaml");
  EXPECT_EQ(c.distributed.grad_dtype, "bf16");
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
  EXPECT_THAT(load_error("distributed: {grad_dtype: fp16}"),
              HasSubstr("distributed.grad_dtype: unknown value 'fp16' (expected one of: fp32, bf16)"));
}

TEST(Config, ResNetNamesAndZeroInitResidual) {
  EXPECT_FALSE(config_from_yaml_string("", "t.yaml").model.zero_init_residual);
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"})
    EXPECT_EQ(config_from_yaml_string(std::string("model: {name: ") + name + "}", "t.yaml").model.name, name);
  const Config c = config_from_yaml_string("model: {name: resnet50, num_classes: 1000, zero_init_residual: true}",
                                           "t.yaml");
  EXPECT_TRUE(c.model.zero_init_residual);
  EXPECT_TRUE(config_from_yaml_string(to_yaml(c), "resolved.yaml") == c) << to_yaml(c);
  EXPECT_THAT(load_error("model: {zero_init_residual: maybe}"),
              HasSubstr("model.zero_init_residual: expected true or false, got 'maybe'"));
}

TEST(Config, ImageDataKeysAndPerDatasetNormalisation) {
  // Unset mean/std: the dataset's own.
  EXPECT_EQ(config_from_yaml_string("", "t.yaml").data.mean, (std::vector<double>{0.2860}));
  const Config folder = config_from_yaml_string("data: {dataset: image_folder, root: /d}", "t.yaml");
  EXPECT_EQ(folder.data.mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(folder.data.std, (std::vector<double>{0.229, 0.224, 0.225}));
  EXPECT_EQ(folder.data.image_size, 224);
  EXPECT_EQ(folder.data.eval_resize_size, 256);
  // A scalar is one value for every channel; a list has one or three.
  EXPECT_EQ(config_from_yaml_string("data: {dataset: synthetic, mean: 0.5}", "t.yaml").data.mean,
            (std::vector<double>{0.5}));
  EXPECT_THAT(load_error("data: {dataset: image_folder, mean: [0.1, 0.2]}"),
              HasSubstr("data.mean: expected one number, or three (one per RGB channel), got 2"));
  EXPECT_THAT(load_error("data: {mean: [0.1, 0.2, 0.3]}"),
              HasSubstr("data.mean: fashion_mnist has one (grey) channel: expected one number, got 3"));
  EXPECT_THAT(load_error("data: {dataset: image_folder, std: [0.2, 0, 0.2]}"),
              HasSubstr("data.std[1]: expected a positive number, got 0"));
  EXPECT_THAT(load_error("data: {crop_scale: [0.5, 0.2]}"), HasSubstr("data.crop_scale: expected [low, high] with low <= high"));
  EXPECT_THAT(load_error("data: {crop_scale: [0.5, 1.5]}"), HasSubstr("data.crop_scale[1]: expected a number in (0, 1]"));
  EXPECT_THAT(load_error("data: {crop_ratio: [0.75]}"), HasSubstr("data.crop_ratio: expected [low, high]"));
  EXPECT_THAT(load_error("data: {eval_resize_size: 200, eval_image_size: 224}"),
              HasSubstr("data.eval_resize_size: the eval image is cut from the resized one: expected at least "
                        "data.eval_image_size (224), got 200"));
  EXPECT_THAT(load_error("data: {dataset: imagenet}"),
              HasSubstr("data.dataset: unknown value 'imagenet' (expected one of: fashion_mnist, image_folder, synthetic, text)"));
  EXPECT_THAT(load_error("data: {image_size: 0}"), HasSubstr("data.image_size: expected an integer in [1, 8192]"));
  // The resolved YAML loads back to the same config.
  EXPECT_EQ(config_from_yaml_string(to_yaml(folder), "again.yaml"), folder);
}

TEST(Config, EvaluationScheduleAndTarget) {
  const Config c = config_from_yaml_string("run: {eval_every: 4, eval_offset: 3, target_accuracy: 0.759}", "t.yaml");
  EXPECT_EQ(c.run.eval_every, 4);
  EXPECT_EQ(c.run.eval_offset, 3);
  EXPECT_DOUBLE_EQ(c.run.target_accuracy, 0.759);
  EXPECT_THAT(load_error("run: {eval_every: 4, eval_offset: 4}"),
              HasSubstr("run.eval_offset: expected a number of epochs below run.eval_every (4), got 4"));
  EXPECT_THAT(load_error("run: {target_accuracy: 1}"), HasSubstr("run.target_accuracy: expected a number in [0, 1)"));
}

// MLPerf BERT evaluates by samples and writes its schedule in steps.
TEST(Config, EvaluationBySamplesAndScheduleInSteps) {
  const Config c = config_from_yaml_string("run: {epochs: 3, eval_every_samples: 150000}\n"
                                           "schedule: {name: linear, warmup_steps: 100, total_steps: 6700}",
                                           "t.yaml");
  EXPECT_EQ(c.run.eval_every_samples, 150000);
  EXPECT_EQ(schedule_steps(c, 5000).total, 6700);  // not epochs x steps per epoch
  EXPECT_EQ(schedule_steps(c, 5000).warmup, 100);
  const Config by_epochs = config_from_yaml_string("run: {epochs: 3}\nschedule: {warmup_epochs: 0.5}", "t.yaml");
  EXPECT_EQ(schedule_steps(by_epochs, 40).total, 120);
  EXPECT_EQ(schedule_steps(by_epochs, 40).warmup, 20);
  EXPECT_THAT(load_error("run: {eval_every_samples: 1000, eval_every: 2}"),
              HasSubstr("run.eval_every_samples: evaluation is scheduled by samples or by epochs"));
  EXPECT_THAT(load_error("run: {eval_every_samples: -1}"), HasSubstr("run.eval_every_samples: expected"));
  EXPECT_THAT(load_error("schedule: {warmup_steps: 10, warmup_epochs: 1}"),
              HasSubstr("schedule.warmup_steps: give the warmup in steps or in epochs"));
  EXPECT_THAT(load_error("schedule: {warmup_steps: 10, total_steps: 5}"),
              HasSubstr("schedule.warmup_steps: expected at most schedule.total_steps (5), got 10"));
}

TEST(Config, LoggingSection) {
  const Config off = config_from_yaml_string("", "t.yaml");
  EXPECT_EQ(off.logging.mllog, "");
  const Config on = config_from_yaml_string(
      "logging: {mllog: logs/mllog.log, benchmark: bert, submission_division: open, submission_status: onprem}",
      "t.yaml");
  EXPECT_EQ(on.logging.mllog, "logs/mllog.log");
  EXPECT_EQ(on.logging.benchmark, "bert");
  EXPECT_EQ(config_from_yaml_string(to_yaml(on), "again.yaml"), on);
  EXPECT_EQ(config_from_yaml_string(to_yaml(off), "again.yaml"), off);
  EXPECT_THAT(load_error("logging: {mllog: /tmp/x.log}"),
              HasSubstr("logging.mllog: expected a file name relative to run.output_dir"));
  EXPECT_THAT(load_error("logging: {benchmark: ssd}"), HasSubstr("logging.benchmark: unknown value 'ssd' (expected one of: resnet, bert)"));
  EXPECT_THAT(load_error("logging: {submission_division: half}"),
              HasSubstr("logging.submission_division: unknown value 'half' (expected one of: closed, open)"));
}

}  // namespace
}  // namespace dp
