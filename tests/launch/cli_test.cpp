#include <gtest/gtest.h>

#include "launch/cli.h"

namespace dp {
namespace {

std::variant<CliArgs, int> parse(std::vector<const char*> args) {
  args.insert(args.begin(), "dptrain");
  return parse_cli(static_cast<int>(args.size()), args.data());
}

TEST(Cli, ConfigAndRepeatedOverrides) {
  auto r = parse({"--config", "a.yaml", "--set", "optimizer.lr=0.1", "--set", "run.epochs=2", "--print-config"});
  ASSERT_TRUE(std::holds_alternative<CliArgs>(r));
  const CliArgs& a = std::get<CliArgs>(r);
  EXPECT_EQ(a.config_path, "a.yaml");
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"optimizer.lr=0.1", "run.epochs=2"}));
  EXPECT_TRUE(a.print_config);
}

TEST(Cli, UsageErrorsExitNonZero) {
  ASSERT_TRUE(std::holds_alternative<int>(parse({})));
  EXPECT_NE(std::get<int>(parse({})), 0);                                   // --config missing
  EXPECT_NE(std::get<int>(parse({"--config", "a.yaml", "--bogus"})), 0);  // unknown flag
  EXPECT_NE(std::get<int>(parse({"--config"})), 0);                        // missing value
}

TEST(Cli, EvaluateTakesTheRecipeOptionsBeforeOrAfterItsName) {
  auto r = parse({"evaluate", "--config", "a.yaml", "--set", "run.threads=1", "--weights", "w.safetensors", "--json"});
  ASSERT_TRUE(std::holds_alternative<CliArgs>(r));
  const CliArgs& a = std::get<CliArgs>(r);
  EXPECT_EQ(a.config_path, "a.yaml");
  EXPECT_EQ(a.overrides, (std::vector<std::string>{"run.threads=1"}));
  ASSERT_TRUE(a.evaluate.has_value());
  EXPECT_EQ(a.evaluate->weights, "w.safetensors");
  EXPECT_TRUE(a.evaluate->checkpoint.empty());
  EXPECT_TRUE(a.evaluate->json);

  auto before = parse({"--config", "b.yaml", "evaluate", "--checkpoint", "auto"});
  ASSERT_TRUE(std::holds_alternative<CliArgs>(before));
  EXPECT_EQ(std::get<CliArgs>(before).config_path, "b.yaml");
  EXPECT_EQ(std::get<CliArgs>(before).evaluate->checkpoint, "auto");
  EXPECT_FALSE(std::get<CliArgs>(before).evaluate->json);
  EXPECT_FALSE(std::get<CliArgs>(parse({"--config", "b.yaml"})).evaluate.has_value());
}

TEST(Cli, EvaluateRefusesTwoSourcesAResumeAndAMissingRecipe) {
  EXPECT_NE(std::get<int>(parse({"evaluate", "--config", "a.yaml", "--weights", "w", "--checkpoint", "auto"})), 0);
  EXPECT_NE(std::get<int>(parse({"evaluate", "--config", "a.yaml", "--weights", "w", "--resume", "auto"})), 0);
  EXPECT_NE(std::get<int>(parse({"evaluate", "--weights", "w"})), 0);  // --config missing
  // An empty value (an unset shell variable) is refused, not taken as "no option".
  EXPECT_NE(std::get<int>(parse({"evaluate", "--config", "a.yaml", "--weights", ""})), 0);
  EXPECT_NE(std::get<int>(parse({"evaluate", "--config", "a.yaml", "--checkpoint", ""})), 0);
}

TEST(Cli, HelpExitsZero) {
  auto r = parse({"--help"});
  ASSERT_TRUE(std::holds_alternative<int>(r));
  EXPECT_EQ(std::get<int>(r), 0);
}

}  // namespace
}  // namespace dp
