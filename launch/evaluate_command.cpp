#include "launch/evaluate_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/ddp/reducer.h"
#include "launch/checkpoint.h"
#include "launch/run_checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/nvtx.h"

namespace dp {

namespace {

// --checkpoint's directory: auto is the newest complete one under the recipe's checkpoints folder.
std::string resolve_checkpoint(const Config& config, const std::string& wanted) {
  if (wanted != "auto") {
    DP_CHECK(std::filesystem::is_directory(wanted), "--checkpoint: '", wanted, "' is not a checkpoint directory (a ",
             "step_<N> folder under <run.output_dir>/checkpoints; for a weights file use --weights)");
    return wanted;
  }
  const std::vector<std::string> all = list_checkpoints(checkpoints_dir(config));
  DP_CHECK(!all.empty(), "--checkpoint auto: no complete checkpoint under ", checkpoints_dir(config),
           " (run.output_dir ", config.run.output_dir, "); name a checkpoint directory or a weights file");
  return all.back();
}

// --checkpoint: the model of a checkpoint directory into the run's model; returns its model
// file's metadata.
std::map<std::string, std::string> load_checkpoint_model(const Config& config, const std::string& dir,
                                                         TrainingRun& run) {
  Checkpoint checkpoint;
  try {
    checkpoint = load_checkpoint(dir, run.cpu);
  } catch (const Error& e) {
    throw Error(detail::concat("--checkpoint: ", e.what()));
  }
  const auto fact = [&](const char* key) {
    const auto it = checkpoint.facts.find(key);
    return it == checkpoint.facts.end() ? std::string() : it->second;
  };
  const std::string model = fact("model"), classes = fact("num_classes");
  const bool fits = (model.empty() || model == config.model.name) &&
                    (classes.empty() || model == "bert" || classes == std::to_string(config.model.num_classes));
  DP_CHECK(fits, "--checkpoint: ", dir, " holds model ", model, model == "bert" ? "" : " with " + classes + " classes",
           "; the recipe builds model ", config.model.name,
           config.model.name == "bert" ? "" : detail::concat(" with ", config.model.num_classes, " classes"),
           " (evaluate it with its own recipe)");
  try {
    run.model->load_state_dict(checkpoint.model);
  } catch (const Error& e) {
    throw Error(detail::concat("--checkpoint: ", dir, " does not fit the recipe's model ", config.model.name, ": ",
                               e.what()));
  }
  return checkpoint.model_metadata;
}

std::string describe_source(const std::string& source, bool checkpoint) {
  return checkpoint ? "checkpoint " + source : source;
}

}  // namespace

EvaluateReport run_evaluate(const Config& recipe, Runtime& runtime, Console& console, std::FILE* json_out,
                            const RunWorld& world, const EvaluateArgs& args) {
  DP_CHECK(args.weights.empty() || args.checkpoint.empty(), "evaluate: give --weights or --checkpoint, not both");
  DP_CHECK(!args.weights.empty() || !args.checkpoint.empty() || !recipe.model.init_from.empty(),
           "evaluate: nothing to evaluate: give --weights FILE (a safetensors file, e.g. a run's ",
           recipe.run.weights_file.empty() ? "model.safetensors" : recipe.run.weights_file,
           ") or --checkpoint DIR|auto, or set model.init_from");
  // The weights are loaded below, naming the option they came from; the recipe's model.init_from
  // is what is evaluated only when neither option is given.
  Config config = recipe;
  const bool from_init = args.weights.empty() && args.checkpoint.empty();
  const std::string weights = from_init ? recipe.model.init_from : args.weights;
  config.model.init_from.clear();
  // What shapes only training must not stop an evaluation (the run is built whole, training loader
  // included): the global batch's split over the ranks (a small batch, a multiple of them, keeps
  // the unused loader's pinned slots small), drop_last, fixed shards, the schedule's fit to the
  // run, CUDA graphs of the training step.
  const int64_t ranks = world.group ? world.group->size() : 1;
  const int rank = world.group ? world.group->rank() : 0;
  config.data.batch_size = ranks;
  config.data.drop_last = false;
  config.distributed.shards = 0;
  config.schedule = ScheduleConfig{};
  config.run.cuda_graphs = false;
  // Rank 0 reads the weights (they are broadcast): found missing before the run is built.
  std::string checkpoint_dir;
  if (rank == 0) {
    if (!args.checkpoint.empty()) checkpoint_dir = resolve_checkpoint(config, args.checkpoint);
    if (args.checkpoint.empty()) {
      const std::string option = from_init ? "model.init_from" : "--weights";
      DP_CHECK(!std::filesystem::is_directory(weights), option, ": '", weights, "' is a directory, not a weights ",
               "file", std::filesystem::exists(std::filesystem::path(weights) / "checkpoint.json")
                   ? " (a checkpoint: evaluate it with --checkpoint " + weights + ")" : std::string());
      DP_CHECK(std::filesystem::exists(weights), option, ": '", weights, "' does not exist");
    }
  }

  std::unique_ptr<TrainingRun> built =
      build_run(config, runtime, world, DataUse::EvaluationOnly);  // NOTE [ Run builder ]
  TrainingRun& run = *built;
  EvaluateReport report;
  const bool from_checkpoint = !args.checkpoint.empty();
  // Rank 0 reads the weights and every rank evaluates them: a file only rank 0's node has will do.
  report.source = from_checkpoint ? checkpoint_dir : weights;
  if (rank == 0) {
    std::map<std::string, std::string> metadata;
    if (from_checkpoint) {
      metadata = load_checkpoint_model(config, checkpoint_dir, run);
    } else {
      const std::string model = config.model.name == "bert"
                                    ? "the recipe's model bert " + config.model.size
                                    : detail::concat("the recipe's model ", config.model.name, " with ",
                                                     config.model.num_classes, " classes");
      metadata = load_model_weights(*run.model, weights, run.cpu, from_init ? "model.init_from" : "--weights",
                                    config.model.name, model);
    }
    // The labels must mean what they meant in training (the weights record its class names).
    if (run.data.eval_images)
      check_weights_classes(metadata, *run.data.eval_images,
                            from_checkpoint ? "--checkpoint" : from_init ? "model.init_from" : "--weights",
                            report.source);
  }
  if (run.world_size > 1) broadcast_model_from_rank0(*run.model, *run.model_group);
  report.model_digest = model_digest(*run.model, run.cpu);
  report.eval_samples = run.eval_set().size();

  const auto start = std::chrono::steady_clock::now();
  {
    const nvtx::ScopedRange range("evaluation");  // NOTE [ NVTX ranges ]
    report.evaluation = evaluate(run);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Test files skipped (data.skip_bad_files) or damaged but decoded: every rank's shard counted.
  const FileReport files = file_report(run.eval_set(), 0);
  report.files = add_file_reports_over_ranks(run, files);

  const Evaluation& e = report.evaluation;
  const bool text = run.plan.token_batching;
  if (args.json) {
    if (json_out) {
      const nlohmann::json record = {
          {"event", "evaluation"},
          {"source", report.source},
          {"kind", from_checkpoint ? "checkpoint" : "weights"},
          {"model", config.model.name},
          {"model_digest", hex_digest(report.model_digest)},
          {"accuracy", e.accuracy},
          {"loss", e.loss},
          {"accuracy_top5", std::isnan(e.accuracy_top5) ? nlohmann::json() : nlohmann::json(e.accuracy_top5)},
          {"samples", report.eval_samples},
          {"classes_from", run.data.classes_from_eval_set.empty() ? "training set" : "evaluation set"},
          {text ? "predicted_tokens" : "count", static_cast<int64_t>(e.count)},
          {"skipped_files", report.files.skipped},
          {"decode_warnings", report.files.warned},
          {"seconds", report.seconds},
          {"device", run.device.str()},
          {"precision", config.run.precision},
          {"ranks", run.world_size}};
      std::fprintf(json_out, "%s\n", record.dump().c_str());
      std::fflush(json_out);
    }
    return report;
  }
  // (Paths may be long: streams, not fixed buffers.)
  console.line("model " + config.model.name + " from " + describe_source(report.source, from_checkpoint) +
               ", model digest " + hex_digest(report.model_digest));
  if (!run.data.classes_from_eval_set.empty()) console.line(run.data.classes_from_eval_set);
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "evaluation: " << report.eval_samples << (text ? " sequences, " + std::to_string(static_cast<int64_t>(e.count)) +
                                                            " predicted tokens"
                                                      : std::string(" samples"))
     << ": test accuracy " << 100.0 * e.accuracy << " %";
  os.precision(4);
  os << " (loss " << e.loss << ")";
  os.precision(2);
  if (!std::isnan(e.accuracy_top5)) os << ", top-5 " << 100.0 * e.accuracy_top5 << " %";
  os.precision(1);
  os << ", " << report.seconds << " s, " << static_cast<double>(report.eval_samples) / report.seconds
     << (text ? " sequences/s" : " samples/s");
  console.line(os.str());
  if (report.files.skipped > 0 || report.files.warned > 0) {
    const std::string first = files.skipped > 0  ? "the first unreadable: " + files.first_skipped
                              : files.warned > 0 ? "the first damaged: " + files.first_warned
                                                 : "all in other ranks' shards (one process names them)";
    console.line(detail::concat("  test files: ", report.files.skipped, " skipped as unreadable (data.skip_bad_files: ",
                                "replaced by the next readable ones), ", report.files.warned,
                                " decoded with a libjpeg warning (damaged data, used as decoded, as PIL does); ",
                                first));
  }
  return report;
}

}  // namespace dp
