// A training run as objects: what build_run() makes from a Config (world, device, data, model,
// optimiser, schedule, loss scaler, reducer) and train_step(), one optimiser step on one batch.
// The loop around them (epochs, evaluation, reports, MLLOG) is launch/trainer.cpp.
//
// NOTE [ Run builder ]
// build_run() is the one place that turns a resolved Config into live objects, in an order that
// matters: datasets before loaders (loaders read them), the model before the reducer (buckets are
// views of its gradients) and the optimiser, the schedule once the loader knows the steps per
// epoch. Everything a mistake in the config could break is checked first (NOTE [ Preflight ]),
// so that a bad recipe fails in seconds naming its keys. Nothing here reads training data: a run's
// MLLOG clock (run_start) may start after build_run() returns.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/ddp/reducer.h"
#include "comm/process_group.h"
#include "launch/config.h"
#include "launch/datasets.h"
#include "launch/objectives.h"
#include "launch/step_profiler.h"
#include "optim/grad_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"
#include "runtime/core/runtime.h"
#include "runtime/data/batch_uploader.h"
#include "runtime/data/loader.h"
#include "runtime/data/token_batching.h"
#include "runtime/nn/batchnorm.h"
#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp {

// Who takes part in the run and where it trains.
struct RunWorld {
  // MPI, CPU tensors; null or size 1: one process.
  ProcessGroup* group = nullptr;
  // The GPU run's group for the model's tensors (NCCL over the same ranks); null on the CPU.
  ProcessGroup* device_group = nullptr;
  // This rank's device (comm/world.h device_for_rank); empty: config.run.device.
  std::string device;
  // distributed.sync_batchnorm: a group over the same ranks for BatchNorm statistics alone, on
  // the model's device (NOTE [ Dedicated group for batch statistics ]); required then.
  ProcessGroup* batch_norm_group = nullptr;
  int nodes = 1;  // nodes the ranks run on (comm/world.h World::nodes), for the metrics' start record
};

// NOTE [ Fixed shards ]
// distributed.shards: S cuts every global batch into S fixed shards: shard s takes what rank s
// of an S-rank run would (DistributedSampler over S, runtime/data/sampler.h), and on W ranks
// (W dividing S) each rank trains its S/W shards one after another as micro-batches: forward and
// backward per shard, gradients accumulating; the all-reduce sums and every gradient is then
// divided by S. BatchNorm normalises over each shard, as per-rank BatchNorm over an S-rank run,
// and only a step's first shard updates the running statistics (the others' would not survive
// the buffer broadcast from rank 0 anyway; with buffer_sync average they would, so that needs as
// many ranks as shards). The arithmetic of a shard therefore does not depend
// on W: with run.deterministic (rank-ordered sums) one process with S shards computes what S
// ranks compute, bit for bit, given the same run.threads per process (a kernel's summation order
// may depend on its thread count) and a model without dropout (one random stream per process).
// Other splits (2 ranks of 2 shards against 4 ranks) differ by the grouping of the gradient sum,
// at rounding level. It is also gradient accumulation: a global batch too big for one rank's
// memory trains as S/W smaller micro-batches. Unset (0): one shard per rank, no micro-batches.
//
// How the epoch is cut: samples this rank visits, its batch, steps.
struct DataPlan {
  int64_t shard_size = 0;  // training samples this rank visits per epoch
  int64_t per_rank_batch = 0;
  int64_t shards = 1;          // S: the global batch's shards (the world size unless distributed.shards)
  int64_t local_shards = 1;    // S / world size: micro-batches per step on this rank
  int64_t per_shard_batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;  // epochs x steps, capped by run.max_steps
  // data.dataset text: batches of rows by the token-batching plan (runtime/data/token_batching.h);
  // per_rank_batch and per_shard_batch are then the most rows a rank batch holds.
  bool token_batching = false;
};

// Members are declared in build order and destroyed in reverse (NOTE [ Run builder ]).
struct TrainingRun {
  // ---- World ----
  Device device, cpu;
  int rank = 0, world_size = 1;
  int nodes = 1;
  ProcessGroup* group = nullptr;        // MPI (CPU tensors); null for one process
  ProcessGroup* model_group = nullptr;  // the model's tensors: `group` on the CPU, NCCL on a GPU
  ProcessGroup* batch_norm_group = nullptr;  // distributed.sync_batchnorm's group; null without it
  // ---- Data ----
  TrainAndEvalData data;
  DataPlan plan;
  std::unique_ptr<BatchUploader> train_uploader, eval_uploader;  // NOTE [ Batch upload ]
  std::unique_ptr<DataLoader> train_loader, eval_loader;
  // ---- Model and its training ----
  // run.seed's stream: the initialisation, then every Dropout mask (the model holds it by
  // reference, so it is declared before the model and outlives it).
  Generator generator{0};
  std::shared_ptr<nn::Module> model;
  std::vector<Tensor> parameters;
  int64_t num_parameters = 0;
  std::unique_ptr<Reducer> reducer;  // distributed runs only
  // NOTE [ Fixed shards ]: set when distributed.shards is; every gradient is then divided by
  // plan.shards after the (summing) all-reduce, and these freeze for all but a step's first shard.
  bool fixed_shards = false;
  std::vector<nn::BatchNorm2d*> batch_norms;
  int synchronised_batchnorms = 0;   // BatchNorm layers normalising over the global batch
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<ScheduleClock> clock;  // NOTE [ Schedule clock ]: the lr lives on the device
  std::unique_ptr<GradScaler> scaler;    // NOTE [ Loss scaling on the device ]
  std::unique_ptr<Objective> objective;  // launch/objectives.h
  double preallocation_seconds = 0;  // NOTE [ Pre-allocation ] in training_run.cpp (text runs)
  // NOTE [ A schedule that does not fit its run ] (config.cpp): said by the trainer at the start.
  std::vector<std::string> schedule_warnings;
  DType autocast = kFloat32;  // run.precision (NOTE [ Autocast policy ])
  // A classification model's input format, run.channels_last resolved (NOTE [ Channels-last ]).
  MemoryFormat input_format = MemoryFormat::Contiguous;
  double clip_grad_norm = 0;  // optimizer.clip_grad_norm; 0: off

  const Dataset& train_set() const { return *data.train; }
  const Dataset& eval_set() const { return *data.eval; }
  // The token-batching plan of a text run (the training loader's); null otherwise.
  const TokenBatchSampler* token_batches() const;
};

// Builds every part of a run from `config` (NOTE [ Run builder ]). In a distributed run every
// rank calls it; the model is broadcast from rank 0. Throws dp::Error naming config keys.
// `use`: DataUse::EvaluationOnly for `dptrain evaluate`: an image folder without train/ will do
// (launch/datasets.h), and a text run makes no pre-allocation pass.
std::unique_ptr<TrainingRun> build_run(const Config& config, Runtime& runtime, const RunWorld& world,
                                       DataUse use = DataUse::Training);

// What one step did. The loss stays on the device (reading it would sync); the communication
// figures are host-clock (MPI) and absent in one-process runs.
struct StepStats {
  Tensor loss;  // float32 [], this rank's mean over its batch
  std::optional<ReducerStepStats> comm;
};

// One optimiser step on `batch` (already on run.device): forward under autocast (per shard,
// NOTE [ Fixed shards ]), scaled backward with the bucket all-reduces overlapped, unscale + non-finite check, clipping,
// optimiser and schedule — all decided on the device (NOTE [ Device-resident optimiser step ]).
// `profiler`'s phases are begun here: forward, backward, comm, optimizer.
StepStats train_step(TrainingRun& run, const Batch& batch, StepProfiler& profiler);

// Each value summed over the ranks of `group` (one small all-reduce on `cpu`); the values
// themselves for one process. Every rank must call it at the same point.
std::vector<double> sum_over_ranks(ProcessGroup* group, std::vector<double> values, Device cpu);

// `mine` with its counts added over the run's ranks (every rank must call it at the same point).
FileReport add_file_reports_over_ranks(const TrainingRun& run, const FileReport& mine);

// Loss and accuracy over the evaluation set, NaN when not evaluated.
struct Evaluation {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN();
  double count = 0;  // what the means are over, all ranks: samples, or predicted tokens for BERT
  double accuracy_top5 = std::numeric_limits<double>::quiet_NaN();  // NaN: not counted (NOTE [ Top-5 accuracy ])
};

// The evaluation set, without autograd and with the model in eval mode (train mode after), in
// the run's precision. Each rank evaluates its shard; the sums stay on the device until the end
// and are added over the ranks (one read, not one per batch).
Evaluation evaluate(TrainingRun& run);

// FNV-1a over every parameter's and buffer's name and bytes: equal digests, equal models (the
// "model digest" a run ends with, and the weights file's `model_digest` metadata).
uint64_t model_digest(nn::Module& model, Device cpu);

// Loads a safetensors file of weights into `model`, strictly (a missing, unexpected or mis-shaped
// tensor is listed, as torch's strict=True). A file dptrain wrote records its model's digest: the
// loaded model must have it, or the file changed since it was written (an error). `origin` opens
// every message ("model.init_from", "--weights"); `model_description` names the model in them.
// Returns the file's metadata (safetensors' __metadata__; empty for a file without).
// `model_name` is model.name: a file dptrain wrote for another model is refused as such.
std::map<std::string, std::string> load_model_weights(nn::Module& model, const std::string& path, Device cpu,
                                                      const std::string& origin, const std::string& model_name,
                                                      const std::string& model_description);

// The metadata of a model file dptrain writes (run.weights_file, a checkpoint's model): format,
// model, num_classes, steps, model_digest, and `classes` (a JSON list of the training set's class
// names, where it has names: check_weights_classes reads it).
std::map<std::string, std::string> model_file_metadata(const Config& config, const TrainingRun& run, int64_t steps,
                                                       uint64_t digest);

// The class names a weights file records (metadata `classes`, model_file_metadata) against
// `data`'s: refused when they differ, since every label would then mean another class. Files
// without the entry, and datasets without names, pass. `origin` and `path` open the message.
void check_weights_classes(const std::map<std::string, std::string>& metadata, const ClassificationDataset& data,
                           const std::string& origin, const std::string& path);

}  // namespace dp
