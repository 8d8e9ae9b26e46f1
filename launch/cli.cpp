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
  PrepareTextArgs prep;
  CLI::App* prep_app = app.add_subcommand(
      "prepare-text", "Turn text files into token shards for BERT (default: Debian's fortunes, the built-in corpus)");
  prep_app->add_option("files", prep.inputs, "Text files (default: every file of /usr/share/games/fortunes)");
  prep_app->add_option("--out", prep.out, "The shard folder to create (never overwritten)")->required();
  prep_app->add_option("--format", prep.format, "plain (a sentence a line, blank lines between documents) or fortune "
                                                "(documents between % lines); default: fortune for the built-in corpus, else plain")
      ->check(CLI::IsMember({"plain", "fortune"}));
  prep_app->add_option("--vocab", prep.vocab, "BERT's vocab.txt; default: build one from the corpus (<out>/vocab.txt)");
  prep_app->add_option("--vocab-words", prep.vocab_words, "Words in a built vocabulary, besides specials and characters")
      ->check(CLI::PositiveNumber);
  prep_app->add_flag("!--cased", prep.lower_case, "Keep case and accents (a cased vocab.txt)");
  prep_app->add_option("--max-seq-length", prep.max_seq_length, "Tokens per sequence, [CLS] and [SEP]s included")
      ->check(CLI::Range(5, 1 << 20));
  prep_app->add_option("--short-seq-prob", prep.short_seq_prob, "Chance of a shorter random target length (Google's 0.1)")
      ->check(CLI::Range(0.0, 1.0));
  prep_app->add_option("--dupe-factor", prep.dupe_factor, "Passes over the corpus, each cut differently")
      ->check(CLI::PositiveNumber);
  prep_app->add_option("--seed", prep.seed, "Seed of the sequence cutting");
  prep_app->add_option("--sequences-per-shard", prep.sequences_per_shard, "Sequences per shard folder")
      ->check(CLI::PositiveNumber);
  prep_app->add_option("--eval-fraction", prep.eval_fraction,
                       "Share of the documents held out for evaluation, written to <out>/eval (0: none)")
      ->check(CLI::Range(0.0, 0.5));
  prep_app->excludes(config)->excludes(set)->excludes(print)->excludes(resume_option);
  ScalingReportArgs report;
  CLI::App* report_app = app.add_subcommand(
      "scaling-report", "Compare runs of one recipe at several sizes from their metrics files: throughput, speedup, "
                        "efficiency, step time by phase, communication (docs/scaling.md; exit 2 on unreadable input)");
  report_app->add_option("runs", report.runs, "Metrics files, or run folders holding metrics.jsonl")->required();
  report_app->add_option("--baseline", report.baseline, "The run to compare with (default: the one with the fewest "
                                                        "ranks)");
  report_app->add_option("--format", report.format, "table (default), markdown, csv or json")
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}));
  report_app->add_option("--skip", report.skip_records, "Step records dropped at each run's start as warm-up "
                                                        "(default 1)")
      ->check(CLI::NonNegativeNumber);
  report_app->excludes(config)->excludes(set)->excludes(print)->excludes(resume_option);
  EvaluateArgs evaluate;
  CLI::App* eval_app = app.add_subcommand(
      "evaluate", "Evaluate weights on the recipe's evaluation set (its data, transforms, model, device, precision "
                  "and ranks), nothing trained or written: --config RECIPE --weights FILE | --checkpoint DIR|auto");
  // --config and --set may follow the subcommand's name too.
  eval_app->fallthrough();
  // An empty value (an unset shell variable) must not fall back to other weights.
  const auto not_empty = [](const std::string& value) {
    return value.empty() ? std::string("an empty path (an unset shell variable?)") : std::string();
  };
  CLI::Option* weights_option = eval_app->add_option(
      "--weights", evaluate.weights, "A safetensors weights file (a run's run.weights_file, or torchvision's names)")
      ->check(not_empty);
  eval_app->add_option("--checkpoint", evaluate.checkpoint,
                       "A checkpoint directory, or auto (the newest under run.output_dir/checkpoints)")
      ->check(not_empty)
      ->excludes(weights_option);
  eval_app->add_flag("--json", evaluate.json, "Print the result as one JSON object");
  eval_app->excludes(print)->excludes(resume_option);
  try {
    app.parse(argc, argv);
    if (!check_app->parsed() && !prep_app->parsed() && !report_app->parsed() && args.config_path.empty())
      throw CLI::RequiredError(config->get_name());
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help/version (exit 0) or the error with a usage hint (non-zero)
    return code != 0 && (check_app->parsed() || report_app->parsed()) ? 2 : code;
  }
  if (check_app->parsed()) args.check_mllog = check;
  if (prep_app->parsed()) args.prepare_text = prep;
  if (report_app->parsed()) args.scaling_report = report;
  if (eval_app->parsed()) args.evaluate = evaluate;
  if (!resume.empty()) args.overrides.push_back("run.resume=" + resume);
  return args;
}

}  // namespace dp
