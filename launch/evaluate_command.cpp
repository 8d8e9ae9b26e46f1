#include "launch/evaluate_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
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

// --checkpoint: the model of a checkpoint directory (auto: the newest under the recipe's
// checkpoints folder); returns the directory.
std::string load_checkpoint_model(const Config& config, const std::string& wanted, TrainingRun& run) {
  std::string dir = wanted;
  if (wanted == "auto") {
    const std::vector<std::string> all = list_checkpoints(checkpoints_dir(config));
    DP_CHECK(!all.empty(), "--checkpoint auto: no complete checkpoint under ", checkpoints_dir(config),
             " (run.output_dir ", config.run.output_dir, "); name a checkpoint directory or a weights file");
    dir = all.back();
  }
  DP_CHECK(std::filesystem::is_directory(dir), "--checkpoint: '", dir, "' is not a checkpoint directory (a ",
           "step_<N> folder under <run.output_dir>/checkpoints; for a weights file use --weights)");
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
  DP_CHECK((model.empty() || model == config.model.name) &&
               (classes.empty() || classes == std::to_string(config.model.num_classes)),
           "--checkpoint: ", dir, " holds model ", model, " with ", classes, " classes; the recipe builds model ",
           config.model.name, " with ", config.model.num_classes, " classes (evaluate it with its own recipe)");
  try {
    run.model->load_state_dict(checkpoint.model);
  } catch (const Error& e) {
    throw Error(detail::concat("--checkpoint: ", dir, " does not fit the recipe's model ", config.model.name, ": ",
                               e.what()));
  }
  return dir;
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
  // What shapes only training must not stop an evaluation: the global batch's split over the ranks
  // (rounded up to a multiple of them), fixed shards, CUDA graphs of the training step.
  const int64_t ranks = world.group ? world.group->size() : 1;
  config.data.batch_size = (config.data.batch_size + ranks - 1) / ranks * ranks;
  config.distributed.shards = 0;
  config.run.cuda_graphs = false;

  std::unique_ptr<TrainingRun> built = build_run(config, runtime, world);  // NOTE [ Run builder ]
  TrainingRun& run = *built;
  EvaluateReport report;
  const bool from_checkpoint = !args.checkpoint.empty();
  if (from_checkpoint) {
    report.source = load_checkpoint_model(config, args.checkpoint, run);
  } else {
    load_model_weights(*run.model, weights, run.cpu, from_init ? "model.init_from" : "--weights",
                       detail::concat("the recipe's model ", config.model.name, " with ", config.model.num_classes,
                                      " classes"));
    report.source = weights;
  }
  // Rank 0's file is the one reported: every rank evaluates its weights.
  if (run.world_size > 1) broadcast_model_from_rank0(*run.model, *run.model_group);
  report.model_digest = model_digest(*run.model, run.cpu);
  report.eval_samples = run.eval_set().size();

  const auto start = std::chrono::steady_clock::now();
  {
    const nvtx::ScopedRange range("evaluation");  // NOTE [ NVTX ranges ]
    report.evaluation = evaluate(run);
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

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
          {text ? "predicted_tokens" : "count", static_cast<int64_t>(e.count)},
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
  return report;
}

}  // namespace dp
