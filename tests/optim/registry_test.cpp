// The optimiser factory, parameter groups with exclusions, and the YAML optimizer / schedule keys.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "launch/config.h"
#include "models/mlp.h"
#include "optim/param_groups.h"
#include "optim/registry.h"
#include "optim/shampoo.h"
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {
namespace {

using ::testing::HasSubstr;

class RegistryTest : public ::testing::Test {
 protected:
  CpuBackend backend{1};
  Device cpu{&backend};
  Generator gen{1};
  MLP model{8, {16}, 4, 0.0, cpu, gen};  // fc weights (2-D) and biases (1-D)
};

TEST_F(RegistryTest, GroupsExcludeOneDimensionalAndNamedParameters) {
  const auto named = model.named_parameters();
  std::vector<ParamGroup> groups = make_param_groups(named, 0.1, 0.01, {});
  ASSERT_EQ(groups.size(), 2u);
  for (const std::string& n : groups[0].names) EXPECT_THAT(n, HasSubstr("weight"));
  for (const std::string& n : groups[1].names) EXPECT_THAT(n, HasSubstr("bias"));
  EXPECT_EQ(groups[0].weight_decay, 0.01);
  EXPECT_TRUE(groups[0].adapt);
  EXPECT_EQ(groups[1].weight_decay, 0.0);
  EXPECT_FALSE(groups[1].adapt);

  // By name only: the first layer's weight joins the excluded group.
  const std::string first = groups[0].names[0];
  std::vector<ParamGroup> by_name = make_param_groups(named, 0.1, 0.01, {.one_dimensional = false,
                                                                        .name_contains = {first}});
  ASSERT_EQ(by_name.size(), 2u);
  EXPECT_EQ(by_name[1].names, std::vector<std::string>{first});
  // Nothing excluded: one group, as torch's optimiser over model.parameters().
  EXPECT_EQ(make_param_groups(named, 0.1, 0.01, {.one_dimensional = false, .name_contains = {}}).size(), 1u);
}

TEST_F(RegistryTest, BuildsEveryOptimiserWithItsDefaults) {
  for (const char* name : {"sgd", "adamw", "lars", "lamb", "shampoo"}) {
    OptimizerSpec spec;
    spec.name = name;
    std::unique_ptr<Optimizer> opt = make_optimizer(spec, model.named_parameters());
    EXPECT_EQ(opt->name(), name);
    const bool excludes = spec.name == "lars" || spec.name == "lamb";
    EXPECT_EQ(opt->param_groups().size(), excludes ? 2u : 1u) << name;
    EXPECT_EQ(opt->param_groups()[0].weight_decay, default_weight_decay(name));
  }
  OptimizerSpec bad;
  bad.name = "adam";
  EXPECT_EQ(testing::error_of([&] { make_optimizer(bad, model.named_parameters()); }),
            "optimizer.name: unknown optimizer 'adam' (known: sgd, adamw, lars, lamb, shampoo)");
  bad.name = "lars";
  bad.eta = 0;
  EXPECT_THAT(testing::error_of([&] { make_optimizer(bad, model.named_parameters()); }), HasSubstr("optimizer.eta"));
}

TEST_F(RegistryTest, ShampooTakesItsOptionsAndBetaTwoOfOne) {
  OptimizerSpec spec;
  spec.name = "shampoo";
  spec.lr = 0.01;
  spec.betas = {0.0, 1.0};  // β2 = 1, plain sums: allowed for shampoo only
  spec.max_preconditioner_dim = 4;
  spec.precondition_frequency = 3;
  spec.grafting = "adagrad";
  std::unique_ptr<Optimizer> opt = make_optimizer(spec, model.named_parameters());
  const auto& shampoo = dynamic_cast<const Shampoo&>(*opt);
  EXPECT_EQ(shampoo.options().beta2, 1.0);
  EXPECT_EQ(shampoo.options().epsilon, 1e-12);
  EXPECT_EQ(shampoo.options().max_preconditioner_dim, 4);
  EXPECT_EQ(shampoo.options().start_preconditioning_step, 3);  // -1 → precondition_frequency
  EXPECT_EQ(shampoo.options().grafting, ShampooGrafting::AdaGrad);
  // fc1 weight 16 × 8 in 4 × 4 blocks, fc2 weight 4 × 16 in 1 × 4, biases 16 (diagonal) and 4.
  EXPECT_EQ(shampoo.blocks().size(), 8u + 4u + 1u + 1u);

  spec.grafting = "rmsprop";
  EXPECT_EQ(testing::error_of([&] { make_optimizer(spec, model.named_parameters()); }),
            "optimizer.grafting: unknown grafting 'rmsprop' (known: none, sgd, adagrad, adam)");
  spec.grafting = "adam";
  spec.name = "adamw";
  EXPECT_THAT(testing::error_of([&] { make_optimizer(spec, model.named_parameters()); }),
              HasSubstr("optimizer.betas: expected two numbers in [0, 1), got [0, 1]"));
}

std::string load_error(const std::string& yaml) {
  return testing::error_of([&] { config_from_yaml_string(yaml, "t.yaml"); });
}

TEST(OptimizerConfigTest, DefaultsFollowTheChosenOptimiser) {
  Config lamb = config_from_yaml_string("optimizer: {name: lamb, lr: 0.002}", "t.yaml");
  EXPECT_EQ(lamb.optimizer.weight_decay, 0.01);
  EXPECT_EQ(lamb.optimizer.eps, 1e-6);
  EXPECT_EQ(lamb.optimizer.exclude_1d, true);
  Config adamw = config_from_yaml_string("optimizer: {name: adamw, weight_decay: 0.1}", "t.yaml");
  EXPECT_EQ(adamw.optimizer.weight_decay, 0.1);
  EXPECT_EQ(adamw.optimizer.eps, 1e-8);
  EXPECT_EQ(adamw.optimizer.exclude_1d, false);
  Config sgd = config_from_yaml_string("", "t.yaml");  // no optimizer section: sgd's defaults
  EXPECT_EQ(sgd.optimizer.weight_decay, 0.0);
  // The resolved config prints every key and reads back the same.
  Config lars = config_from_yaml_string(
      "optimizer: {name: lars, lr: 5, eta: 0.002, lr_outside_momentum: true, exclude_names: [bn, downsample]}\n"
      "schedule: {name: poly, warmup_epochs: 1, power: 2, min_lr: 0.0001, count_skipped_steps: false}",
      "t.yaml");
  EXPECT_EQ(config_from_yaml_string(to_yaml(lars), "again.yaml"), lars);
  EXPECT_THAT(to_yaml(lars), HasSubstr("exclude_names: [bn, downsample]"));
  EXPECT_FALSE(lars.schedule.count_skipped_steps);
}

TEST(OptimizerConfigTest, ErrorsNameTheKey) {
  EXPECT_EQ(load_error("optimizer: {name: adam}"),
            "t.yaml:1: optimizer.name: unknown value 'adam' (expected one of: sgd, adamw, lars, lamb, shampoo)");
  EXPECT_EQ(load_error("optimizer:\n  betas: [0.9, 1.5]\n"),
            "t.yaml:2: optimizer.betas[1]: expected a number in [0, 1], got 1.5");
  EXPECT_THAT(load_error("optimizer: {betas: [0.9]}"), HasSubstr("optimizer.betas: expected two numbers"));
  EXPECT_THAT(load_error("optimizer:\n  eps: -1\n"), HasSubstr("t.yaml:2: optimizer.eps: expected a non-negative"));
  EXPECT_THAT(load_error("optimizer: {eta: 0}"), HasSubstr("optimizer.eta: expected a positive number"));
  EXPECT_THAT(load_error("schedule: {name: exp}"), HasSubstr("(expected one of: constant, step, cosine, poly, linear)"));
  EXPECT_THAT(load_error("schedule: {power: 0}"), HasSubstr("schedule.power: expected a positive number"));
  EXPECT_EQ(load_error("optimizer: {name: adamw, betas: [0.9, 1]}"),
            "t.yaml:1: optimizer.betas: adamw needs beta2 in [0, 1) (only shampoo takes 1), got 1");
  EXPECT_EQ(load_error("optimizer: {name: shampoo, grafting: rmsprop}"),
            "t.yaml:1: optimizer.grafting: unknown value 'rmsprop' (expected one of: none, sgd, adagrad, adam)");
  EXPECT_THAT(load_error("optimizer: {name: shampoo, start_preconditioning_step: 0}"),
              HasSubstr("optimizer.start_preconditioning_step: expected a positive integer, or -1"));
  EXPECT_THAT(load_error("optimizer: {name: shampoo, precondition_frequency: 0}"),
              HasSubstr("optimizer.precondition_frequency: expected an integer in [1, 1000000000000], got 0"));
}

TEST(OptimizerConfigTest, ShampooKeysResolveAndReadBack) {
  Config c = config_from_yaml_string(
      "optimizer: {name: shampoo, lr: 0.002, betas: [0.9, 1.0], precondition_frequency: 50, grafting: sgd}", "t.yaml");
  EXPECT_EQ(c.optimizer.eps, 1e-12);
  EXPECT_EQ(c.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.optimizer.exclude_1d, false);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 1.0}));
  EXPECT_EQ(c.optimizer.start_preconditioning_step, -1);
  EXPECT_EQ(config_from_yaml_string(to_yaml(c), "again.yaml"), c);
}

}  // namespace
}  // namespace dp
