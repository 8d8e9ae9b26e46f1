#include "launch/cli.h"

#include <CLI/CLI.hpp>

#include "launch/version.h"

namespace dp {

std::variant<CliArgs, int> parse_cli(int argc, const char* const* argv) {
  CliArgs args;
  CheckMllogArgs check;
  CLI::App app{"dptrain: data-parallel deep-learning training", "dptrain"};
  app.set_version_flag("--version", std::string("dptrain ") + kDptrainVersion);
  // Required unless a subcommand runs instead (checked after parsing).
  CLI::Option* config = app.add_option("-c,--config", args.config_path, "YAML recipe, e.g. configs/fashion_mnist.yaml");
  CLI::Option* set =
      app.add_option("--set", args.overrides,
                     "Override a config value: section.key=value (repeatable), e.g. --set optimizer.lr=0.1")
          ->take_all()
          ->allow_extra_args(false);
  CLI::Option* print = app.add_flag("--print-config", args.print_config, "Print the resolved configuration and exit");
  std::string resume;
  CLI::Option* resume_option =
      app.add_option("--resume", resume,
                     "Continue from a checkpoint: auto (the newest under run.output_dir/checkpoints, or a fresh "
                     "start when there is none) or a checkpoint directory (same as --set run.resume=...)");
  CLI::App* check_app = app.add_subcommand("check-mllog", "Check an MLPerf :::MLLOG file against the benchmark's "
                                                           "rules (exit 0 compliant, 1 not, 2 unreadable)");
  check_app->add_option("file", check.path, "The log to check")->required();
  check_app->add_option("--benchmark", check.benchmark, "Rule set: resnet (4.0.0) or bert (5.0.0)")
      ->required()
      ->check(CLI::IsMember({"resnet", "bert"}));
  check_app->excludes(config)->excludes(set)->excludes(print)->excludes(resume_option);
  try {
    app.parse(argc, argv);
    if (!check_app->parsed() && args.config_path.empty()) throw CLI::RequiredError(config->get_name());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help/version (exit 0) or the error with a usage hint (non-zero)
    return code != 0 && check_app->parsed() ? 2 : code;
  }
  if (check_app->parsed()) args.check_mllog = check;
  if (!resume.empty()) args.overrides.push_back("run.resume=" + resume);
  return args;
}

}  // namespace dp
