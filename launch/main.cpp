// dptrain: train a model from a YAML recipe.
//   dptrain --config configs/fashion_mnist.yaml [--set section.key=value ...] [--print-config]
#include <cstdio>
#include <exception>

#include "launch/cli.h"
#include "launch/config.h"
#include "launch/console.h"
#include "launch/metrics_log.h"
#include "launch/trainer.h"
#include "runtime/core/error.h"
#include "runtime/core/runtime.h"

int main(int argc, char** argv) {
  std::variant<dp::CliArgs, int> parsed = dp::parse_cli(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const dp::CliArgs& args = std::get<dp::CliArgs>(parsed);
  try {
    const dp::Config config = dp::load_config(args.config_path, args.overrides);
    if (args.print_config) {
      std::fputs(dp::to_yaml(config).c_str(), stdout);
      return 0;
    }
    dp::Console console(stdout, dp::Console::is_terminal(stdout));
    console.line("dptrain 0.1.0 — resolved configuration (" + args.config_path + "):");
    console.line(dp::to_yaml(config));
    dp::Runtime runtime(dp::RuntimeOptions{static_cast<int>(config.run.threads)});
    dp::MetricsLog metrics(dp::prepare_metrics_path(config));
    dp::TrainReport report = dp::train(config, runtime, console, &metrics);
    char line[160];
    std::snprintf(line, sizeof line, "done: %lld steps, peak RSS %.0f MiB, metrics in %s",
                  static_cast<long long>(report.steps), report.peak_rss_mib, metrics.path().c_str());
    console.line(line);
    return 0;
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "dptrain: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dptrain: unexpected error: %s\n", e.what());
    return 2;
  }
}
