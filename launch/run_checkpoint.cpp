#include "launch/run_checkpoint.h"

#include <filesystem>
#include <sstream>
#include <tuple>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/ops/creation.h"

namespace dp {

namespace {

namespace fs = std::filesystem;

constexpr const char* kConfigFact = "config";

// The entries of `state` under `prefix`, without it.
NamedTensorList under(const NamedTensorList& state, const std::string& prefix) {
  NamedTensorList out;
  for (const auto& [name, t] : state)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

const Tensor& entry(const NamedTensorList& state, const std::string& name, const std::string& where) {
  for (const auto& [n, t] : state)
    if (n == name) return t;
  throw Error(detail::concat(where, ": the state has no '", name, "'"));
}

uint64_t as_u64(const Tensor& t) { return static_cast<uint64_t>(t.item<int64_t>()); }

}  // namespace

std::string checkpoints_dir(const Config& config) {
  return (fs::path(config.run.output_dir) / "checkpoints").string();
}

std::string resume_relevant_config(const Config& config) {
  // kResumeFreeKeys: what may differ between a run and the run resuming it.
  Config c = config;
  const Config defaults;
  c.run.name = defaults.run.name;
  c.run.threads = defaults.run.threads;
  c.run.device = defaults.run.device;
  c.run.output_dir = defaults.run.output_dir;
  c.run.log_every = defaults.run.log_every;
  c.run.metrics_file = defaults.run.metrics_file;
  c.run.weights_file = defaults.run.weights_file;
  c.run.max_steps = defaults.run.max_steps;
  c.run.checkpoint_every = defaults.run.checkpoint_every;
  c.run.checkpoint_every_epochs = defaults.run.checkpoint_every_epochs;
  c.run.keep_checkpoints = defaults.run.keep_checkpoints;
  c.run.resume = defaults.run.resume;
  c.run.max_skipped_steps = defaults.run.max_skipped_steps;
  c.run.target_accuracy = defaults.run.target_accuracy;  // when to stop, as max_steps
  c.run.cpu_memory_limit_gib = defaults.run.cpu_memory_limit_gib;
  c.run.check_host_syncs = defaults.run.check_host_syncs;  // checks, computes nothing
  c.data.root = defaults.data.root;
  c.data.loader_threads = defaults.data.loader_threads;
  c.data.prefetch = defaults.data.prefetch;
  c.data.skip_bad_files = defaults.data.skip_bad_files;
  c.distributed.backend = defaults.distributed.backend;
  c.distributed.first_bucket_mb = defaults.distributed.first_bucket_mb;
  c.distributed.bucket_mb = defaults.distributed.bucket_mb;
  c.distributed.timeout_s = defaults.distributed.timeout_s;
  c.distributed.checkpoint_timeout_s = defaults.distributed.checkpoint_timeout_s;
  c.distributed.check_agreement = defaults.distributed.check_agreement;
  c.model.init_from = defaults.model.init_from;  // the checkpoint's weights replace it
  c.logging = defaults.logging;
  return to_yaml(c);
}

namespace {

constexpr const char* kRankBuffersPrefix = "rank_buffers.";

// The checkpoint facts naming the data the run read (NOTE [ Resuming a run ]).
constexpr const char* kTrainingDataFact = "training_data";
constexpr const char* kEvaluationDataFact = "evaluation_data";

std::string data_fact(const Dataset& data) {
  return detail::concat(data.size(), " samples, content digest ", hex_digest(data.content_digest()));
}

}  // namespace

NamedTensorList gather_rank_buffers(TrainingRun& run, const Config& config) {
  NamedTensorList out;
  if (run.world_size < 2 || config.distributed.buffer_sync != "average") return out;
  for (const auto& [name, t] : run.model->named_buffers()) {
    if (!is_floating(t.dtype())) continue;  // integer ones (num_batches_tracked) are equal on every rank
    const Tensor mine = t.contiguous().reshape({t.numel()});
    const Tensor all = empty({run.world_size * t.numel()}, t.dtype(), t.device());
    run.model_group->all_gather(mine, all)->wait();
    if (run.rank != 0) continue;
    const Tensor host = all.to(run.cpu);
    for (int r = 1; r < run.world_size; ++r)
      out.emplace_back(detail::concat(kRankBuffersPrefix, r, ".", name),
                       host.narrow(0, r * t.numel(), t.numel()).reshape(t.shape()).clone());
  }
  return out;
}

Checkpoint capture_checkpoint(TrainingRun& run, const Config& config, const CheckpointPosition& position,
                              const NamedTensorList& rank_buffers) {
  Checkpoint c;
  c.position = position;
  c.world_size = run.world_size;
  c.config_hash = Fnv1a().text(resume_relevant_config(config)).value();
  c.facts = {{"model", config.model.name},
             {"num_classes", std::to_string(config.model.num_classes)},
             {"optimizer", config.optimizer.name},
             {kConfigFact, resume_relevant_config(config)},
             {kTrainingDataFact, data_fact(run.train_set())},
             {kEvaluationDataFact, data_fact(run.eval_set())}};
  c.model = nn::without_tied_duplicates(run.model->state_dict());  // BERT's decoder is its word embedding
  // As run.weights_file's: load_model_weights checks a file used alone against it.
  c.model_metadata = model_file_metadata(config, run, position.step, model_digest(*run.model, run.cpu));
  for (const auto& [name, t] : run.optimizer->state_dict()) c.state.emplace_back("optimizer." + name, t);
  for (const auto& [name, t] : run.scaler->state_dict()) c.state.emplace_back("scaler." + name, t);
  for (const auto& entry : rank_buffers) c.state.push_back(entry);
  c.state.emplace_back("clock.steps", scalar_tensor(static_cast<double>(run.clock->steps()), kInt64, run.cpu));
  // Philox state: two 64-bit words, stored as int64 bit patterns (from_vector keeps all 64 bits).
  c.state.emplace_back("generator.seed",
                       from_vector<int64_t>({static_cast<int64_t>(run.generator.seed())}, {}, run.cpu));
  c.state.emplace_back("generator.offset",
                       from_vector<int64_t>({static_cast<int64_t>(run.generator.offset())}, {}, run.cpu));
  return c;
}

CheckpointPosition restore_checkpoint(TrainingRun& run, const Config& config, const Checkpoint& checkpoint,
                                      const std::string& where) {
  // The configuration: every key that changes what is computed must agree.
  const auto saved_config = checkpoint.facts.find(kConfigFact);
  DP_CHECK(saved_config != checkpoint.facts.end(), where, ": the checkpoint records no configuration");
  const std::map<std::string, std::string> then = config_key_values(saved_config->second),
                                           now = config_key_values(resume_relevant_config(config));
  // A key the checkpoint does not name came into dptrain after it was written: the run then
  // computed what the key's default computes.
  const std::map<std::string, std::string> defaults = config_key_values(resume_relevant_config(Config{}));
  std::string differences;
  int count = 0;
  for (const auto& [key, value] : now) {
    const auto it = then.find(key);
    const auto default_it = defaults.find(key);
    if (it == then.end() && default_it != defaults.end() && default_it->second == value) continue;
    const std::string old_value = it == then.end() ? "(absent)" : it->second;
    if (old_value != value && ++count <= 12)
      differences += "\n  " + key + ": " + old_value + " in the checkpoint, " + value + " now";
  }
  for (const auto& [key, value] : then)
    if (!now.count(key) && ++count <= 12) differences += "\n  " + key + ": " + value + " in the checkpoint, absent now";
  DP_CHECK(count == 0, where, ": this run's configuration differs from the checkpoint's in ", count, " key",
           count == 1 ? "" : "s", " (a resumed run must compute what the interrupted one would have):", differences,
           count > 12 ? "\n  ..." : "");
  // The data: the same samples (a checkpoint from before dptrain recorded them is not checked).
  for (const auto& [fact, data, split] :
       {std::tuple{kTrainingDataFact, &run.train_set(), "training"},
        std::tuple{kEvaluationDataFact, &run.eval_set(), "evaluation"}}) {
    const auto then_data = checkpoint.facts.find(fact);
    if (then_data == checkpoint.facts.end()) continue;
    const std::string now_data = data_fact(*data);
    DP_CHECK(then_data->second == now_data, where, ": the ", split, " data differ from the checkpoint's: ",
             then_data->second, " then, ", now_data, " now (", data->description(), "), so the resumed run would not ",
             "compute what the interrupted one would have. Give the data as they were (a bad file can be skipped ",
             "with data.skip_bad_files instead of removed; the folder may move: data.root), or start a new run from ",
             "the checkpoint's weights (model.init_from: its model.safetensors)");
  }
  // The world: the same size, or any size the fixed shards allow.
  if (checkpoint.world_size != run.world_size) {
    DP_CHECK(config.distributed.shards > 0, where, ": written by ", checkpoint.world_size, " rank",
             checkpoint.world_size == 1 ? "" : "s", ", resumed on ", run.world_size,
             ": each rank's batch and BatchNorm statistics would change. Resume on ", checkpoint.world_size,
             checkpoint.world_size == 1 ? " rank" : " ranks", " (a run that may change its world size needs ",
             "distributed.shards from its start: any world size dividing it can then continue, NOTE [ Fixed shards ])");
  }
  try {
    run.model->load_state_dict(checkpoint.model);
    // buffer_sync average: this rank's own running statistics (gather_rank_buffers).
    const NamedTensorList own = under(checkpoint.state, detail::concat(kRankBuffersPrefix, run.rank, "."));
    if (!own.empty()) run.model->load_state_dict(own, /*strict=*/false);  // a subset: the buffers
    run.optimizer->load_state_dict(under(checkpoint.state, "optimizer."));
    run.scaler->load_state_dict(under(checkpoint.state, "scaler."));
    run.clock->set_steps(entry(checkpoint.state, "clock.steps", where).item<int64_t>());
    run.generator.set_state(as_u64(entry(checkpoint.state, "generator.seed", where)),
                            as_u64(entry(checkpoint.state, "generator.offset", where)));
  } catch (const Error& e) {
    throw Error(detail::concat(where, ": ", e.what()));
  }
  const CheckpointPosition& at = checkpoint.position;
  DP_CHECK(at.step_in_epoch <= run.plan.steps_per_epoch, where, ": position ", at.step_in_epoch,
           " steps into epoch ", at.epoch + 1, ", which has ", run.plan.steps_per_epoch);
  return at;
}

std::string checkpoint_to_resume(const Config& config) {
  const std::string& resume = config.run.resume;
  if (resume.empty()) return "";
  if (resume == "auto") {
    const std::vector<std::string> all = list_checkpoints(checkpoints_dir(config));
    return all.empty() ? "" : all.back();
  }
  DP_CHECK(fs::is_directory(resume), "run.resume: '", resume, "' is not a checkpoint directory (give one under ",
           checkpoints_dir(config), ", or auto)");
  return resume;
}

}  // namespace dp
