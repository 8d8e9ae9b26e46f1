// Writes the first N training batches of a run, exactly as the trainer's training loader hands
// them out, to one safetensors file: what bench/bert_loss_curve.py trains PyTorch on, so that
// both sides see the same data in the same order.
//
//   dump_mlm_batches --config configs/bert_tiny.yaml [--set section.key=value ...] --steps 200 --out batches.safetensors
//
// The run is built as the trainer builds it (dp::build_run, one process, on the CPU whatever
// run.device says: the batches do not depend on the device), then train_loader->begin_epoch(0)
// and next() N times; at an epoch's end it continues with begin_epoch(1), ... as the trainer
// does. Tensor k's names are "step<k>.<batch tensor name>" (k from 0): for a text run the tensors
// of NOTE [ MLM batches ] in runtime/text/mlm_dataset.h (input_ids, token_type_ids,
// position_ids, sequence_ids, mlm_positions, mlm_labels, mlm_weights), copied out of the
// loader's buffers. The file's metadata: steps, steps_per_epoch, the epoch of each step
// (epochs: "0,0,...,1,..."), the model's vocab_size and max_position_embeddings for a BERT run,
// packed (true/false), and the config file. Errors (a bad config, --steps past run.epochs x the
// steps per epoch, an unwritable --out): a message on stderr, exit status 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/config.h"
#include "launch/training_run.h"
#include "models/bert.h"
#include "runtime/core/error.h"
#include "runtime/core/runtime.h"
#include "runtime/io/tensor_file.h"

int main(int argc, char** argv) {
  std::string config_path, out_path;
  std::vector<std::string> overrides;
  long long steps = 0;
  CLI::App app{"Write a run's first N training batches (as the trainer's loader hands them out) to safetensors",
               "dump_mlm_batches"};
  app.add_option("-c,--config", config_path, "YAML recipe, e.g. configs/bert_tiny.yaml")->required();
  app.add_option("--set", overrides, "Override a config value: section.key=value (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  app.add_option("--steps", steps, "Batches to write (the trainer's first N steps)")->required();
  app.add_option("--out", out_path, "The safetensors file to write")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 1;
  }

  if (steps < 1) {
    std::fprintf(stderr, "dump_mlm_batches: error: --steps must be at least 1, got %lld\n", steps);
    return 1;
  }
  try {
    const dp::Config config = dp::load_config(config_path, overrides);
    dp::RuntimeOptions runtime_options;
    runtime_options.cpu_threads = static_cast<int>(config.run.threads);
    dp::Runtime runtime(runtime_options);
    dp::RunWorld world;  // one process
    world.device = "cpu";
    std::unique_ptr<dp::TrainingRun> run = dp::build_run(config, runtime, world);
    DP_CHECK(run->train_loader != nullptr, "the run has no training loader");

    dp::NamedTensorList tensors;
    std::string epochs_of_steps;
    int64_t epoch = 0;
    run->train_loader->begin_epoch(epoch);
    for (long long k = 0; k < steps; ++k) {
      std::optional<dp::LoadedBatch> batch = run->train_loader->next();
      if (!batch) {  // the epoch is over: the trainer's next epoch
        ++epoch;
        DP_CHECK(epoch < config.run.epochs, "--steps ", steps, " is more than the run trains: run.epochs ",
                 config.run.epochs, " of ", run->plan.steps_per_epoch, " steps");
        run->train_loader->begin_epoch(epoch);
        batch = run->train_loader->next();
        DP_CHECK(batch.has_value(), "epoch ", epoch, " handed out no batch (", run->plan.steps_per_epoch,
                 " steps per epoch planned)");
      }
      const std::string prefix = "step" + std::to_string(k) + ".";
      // The loader reuses its buffers once the batch is released: copy the values out first.
      for (const auto& [name, t] : batch->tensors()) tensors.emplace_back(prefix + name, t.clone());
      epochs_of_steps += (k == 0 ? "" : ",") + std::to_string(epoch);
      batch.reset();  // hand the buffers back to the loader
    }

    std::map<std::string, std::string> metadata;
    metadata["steps"] = std::to_string(steps);
    metadata["steps_per_epoch"] = std::to_string(run->plan.steps_per_epoch);
    metadata["epochs"] = epochs_of_steps;
    metadata["config"] = config_path;
    metadata["packed"] = config.data.packing == "greedy" ? "true" : "false";
    if (auto* bert = dynamic_cast<dp::BertForPreTraining*>(run->model.get())) {
      metadata["vocab_size"] = std::to_string(bert->bert->config.vocab_size);
      metadata["max_position_embeddings"] = std::to_string(bert->bert->config.max_position_embeddings);
    }
    dp::save_tensors(out_path, tensors, metadata);
    std::printf("%s: %lld batches (%zu tensors), %lld steps per epoch, epochs %lld..%lld\n", out_path.c_str(), steps,
                tensors.size(), static_cast<long long>(run->plan.steps_per_epoch), 0LL,
                static_cast<long long>(epoch));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dump_mlm_batches: error: %s\n", e.what());
    return 1;
  }
}
