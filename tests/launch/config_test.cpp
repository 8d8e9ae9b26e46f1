#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/expect_error.h"
#include "launch/config.h"
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
              HasSubstr("test.yaml:2: distributed.timeout_s: expected a non-negative number, got -1"));
}

TEST(Config, RejectsBadValuesNamingFileLineAndKey) {
  EXPECT_EQ(load_error("optimizer:\n  lr: -0.1\n"), "test.yaml:2: optimizer.lr: expected a positive number, got -0.1");
  EXPECT_THAT(load_error("data:\n  batch_size: 0\n"), HasSubstr("data.batch_size: expected a positive integer, got 0"));
  EXPECT_THAT(load_error("run:\n  epochs: three\n"), HasSubstr("run.epochs: expected a positive integer, got 'three'"));
  EXPECT_THAT(load_error("run:\n  epochs: 1.5\n"), HasSubstr("run.epochs: expected a positive integer, got '1.5'"));
  EXPECT_THAT(load_error("data:\n  shuffle: maybe\n"), HasSubstr("data.shuffle: expected true or false"));
  EXPECT_THAT(load_error("model:\n  name: vgg\n"),
              HasSubstr("model.name: unknown value 'vgg' (expected one of: small_cnn, mlp, resnet18)"));
  EXPECT_THAT(load_error("run:\n  device: gpu\n"), HasSubstr("run.device: expected cpu, cuda or cuda:N"));
  EXPECT_THAT(load_error("model:\n  mlp_hidden: [10, -1]\n"), HasSubstr("model.mlp_hidden[1]: expected a positive integer"));
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

TEST(Config, CrossFieldRules) {
  EXPECT_THAT(load_error("optimizer: {momentum: 0, nesterov: true}"),
              HasSubstr("optimizer.nesterov: nesterov needs momentum > 0 and dampening 0"));
  EXPECT_THAT(load_error("schedule: {name: step}"), HasSubstr("schedule.step_epochs: the step schedule needs"));
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
  Config c = config_from_yaml_string("optimizer: {lr: 0.1}", "t.yaml",
                                     {"optimizer.lr=0.2", "model.mlp_hidden=[512,256]", "run.device=cuda"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);
  EXPECT_EQ(c.model.mlp_hidden, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(c.run.device, "cuda");
  EXPECT_THAT(load_error("", {"optimizer.lrr=0.1"}),
              HasSubstr("--set optimizer.lrr=0.1: unknown key 'optimizer.lrr' (known keys in 'optimizer'"));
  EXPECT_EQ(load_error("", {"optimizer.lr=-1"}), "--set optimizer.lr=-1: optimizer.lr: expected a positive number, got -1");
  EXPECT_THAT(load_error("", {"optimizer"}), HasSubstr("--set optimizer: expected section.key=value"));
  EXPECT_THAT(load_error("", {"foo.bar=1"}), HasSubstr("unknown section 'foo'"));
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
  Config c = load_config((dir / "fashion_mnist.yaml").string());
  EXPECT_EQ(c.model.name, "small_cnn");
  EXPECT_EQ(c.run.epochs, 3);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.9);
  EXPECT_EQ(c.data.batch_size, 128);
}

}  // namespace
}  // namespace dp
