#include "launch/cli.h"

#include <CLI/CLI.hpp>

namespace dp {

std::variant<CliArgs, int> parse_cli(int argc, const char* const* argv) {
  CliArgs args;
  CLI::App app{"dptrain: data-parallel deep-learning training", "dptrain"};
  app.set_version_flag("--version", "dptrain 0.1.0");
  app.add_option("-c,--config", args.config_path, "YAML recipe, e.g. configs/fashion_mnist.yaml")->required();
  app.add_option("--set", args.overrides,
                 "Override a config value: section.key=value (repeatable), e.g. --set optimizer.lr=0.1")
      ->take_all()
      ->allow_extra_args(false);
  app.add_flag("--print-config", args.print_config, "Print the resolved configuration and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);  // prints help/version (exit 0) or the error with a usage hint (non-zero)
  }
  return args;
}

}  // namespace dp
