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

TEST(Cli, HelpExitsZero) {
  auto r = parse({"--help"});
  ASSERT_TRUE(std::holds_alternative<int>(r));
  EXPECT_EQ(std::get<int>(r), 0);
}

}  // namespace
}  // namespace dp
