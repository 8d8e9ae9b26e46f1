// The dptrain configuration: one typed struct per YAML section, validated at load.
//
// Every key has a default; unknown keys, wrong types and out-of-range values are rejected with
// a message naming the file, line and key, e.g.
//   configs/x.yaml:7: optimizer.lr: expected a positive number, got -0.1
// The reference of every key is docs/configuration.md.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "optim/optimizer_spec.h"
#include "runtime/core/dtype.h"

namespace dp {

// The valid range of every count in a recipe (docs/configuration.md). They are generous for real
// runs and small enough that no product the trainer forms (epochs x steps, batch x sample bytes,
// MiB x 2^20) can overflow, and a typo with extra zeros is refused at load.
namespace limits {
inline constexpr int64_t kMaxEpochs = 100'000;
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;    // max_steps, log_every, step counts
inline constexpr int64_t kMaxThreads = 1024;
inline constexpr int64_t kMaxBatch = 16'777'216;            // 2^24 samples (global batch)
inline constexpr int64_t kMaxLoaderThreads = 256;
inline constexpr int64_t kMaxShards = 65'536;              // distributed.shards
inline constexpr int64_t kMaxKeptCheckpoints = 1'000'000;   // run.keep_checkpoints
inline constexpr int64_t kMaxPrefetch = 64;
inline constexpr int64_t kMaxClasses = 1'000'000;
inline constexpr int64_t kMaxWidth = 1'048'576;             // one hidden layer's width
inline constexpr size_t kMaxLayers = 256;                   // list lengths (hidden layers, milestones)
inline constexpr int64_t kMaxPreconditionerDim = 16'384;
inline constexpr double kMaxBucketMb = 65'536;
inline constexpr double kMaxTimeoutSeconds = 604'800;       // 7 days
inline constexpr int kMaxDeviceIndex = 1023;
inline constexpr int64_t kMaxSkippedSteps = 1'000'000;
inline constexpr int64_t kMaxImageSize = 8192;              // one side, in pixels
inline constexpr int64_t kMaxSamples = 1'000'000'000;       // synthetic dataset sizes
inline constexpr int64_t kMaxSeqLength = 65'536;            // tokens in one sequence
inline constexpr int64_t kMaxTokens = 1'073'741'824;        // 2^30 padded tokens per rank batch
}  // namespace limits

struct RunConfig {
  std::string name;
  uint64_t seed = 0;
  int64_t epochs = 1;
  int64_t threads = 2;                 // CPU threads for kernels
  std::string device = "cpu";          // cpu | cuda | cuda:N
  std::string output_dir = "runs/default";
  int64_t log_every = 50;              // steps between progress reports
  std::string metrics_file = "metrics.jsonl";  // relative to output_dir
  // The final weights (rank 0), torch's names, safetensors; relative to output_dir; empty: none.
  std::string weights_file = "model.safetensors";
  // NOTE [ Resuming a run ] (launch/run_checkpoint.h): checkpoints under output_dir/checkpoints
  // every this many steps and/or epochs (0: off; a stopping signal always writes one), the newest
  // keep_checkpoints kept; resume: "" (start afresh), "auto" (the newest checkpoint, if any) or a
  // checkpoint directory.
  int64_t checkpoint_every = 0;
  int64_t checkpoint_every_epochs = 0;
  int64_t keep_checkpoints = 2;
  std::string resume;
  int64_t max_steps = 0;               // 0 = no limit
  bool eval_every_epoch = true;        // false: evaluate after the last epoch only
  // Evaluate after epoch e when (e + eval_offset) % eval_every == 0, and after the last epoch
  // (MLPerf ResNet: every 4 epochs, the first after 4 - offset).
  int64_t eval_every = 1;
  int64_t eval_offset = 0;
  // Evaluate instead every time this many samples (sequences for text, over all ranks) have been
  // trained since the start, and after the last epoch; 0: by epochs (above). MLPerf BERT's
  // interval is floor(0.05·(230.23·B + 3,000,000)/25,000)·25,000 for a global batch of B
  // (mlperf_bert_eval_interval, launch/mllog.h). MLLOG then counts in samples (epoch_num =
  // samples trained, blocks between evaluations).
  int64_t eval_every_samples = 0;
  // Stop after the evaluation that reaches this test accuracy (a fraction; 0: train all epochs).
  double target_accuracy = 0.0;
  // Bitwise-repeatable runs: rank-ordered gradient sums (NOTE [ Rank-ordered sums ] in
  // comm/mpi/mpi_process_group.h); the rest of the CPU path is repeatable already for a fixed
  // thread count and seed.
  bool deterministic = false;
  // GPU: float32 GEMMs and convolutions on tensor cores with TF32 inputs (10-bit mantissa,
  // several times faster). PyTorch's matmul default (off); its cuDNN default is on.
  bool allow_tf32 = false;
  // GPU: time every cuDNN convolution algorithm once per shape and keep the fastest
  // (torch.backends.cudnn.benchmark); off: cuDNN's heuristic choice.
  bool cudnn_benchmark = true;
  // Every training step runs under a ForbidHostSyncGuard (NOTE [ Host-sync checking ] in
  // runtime/core/host_sync.h): a read of a device value on the host inside a step (item(), a copy
  // to the CPU, synchronize()) ends the run with an error naming it. Checks the CPU path too: the
  // same read on a GPU would stall the step and rule out CUDA graphs.
  bool check_host_syncs = false;
  // GPU: after cuda_graph_warmup eager steps of a batch shape, capture one training step as a
  // CUDA graph and replay it for every later step of that shape (NOTE [ CUDA graphs ] in
  // launch/graphed_step.h).
  bool cuda_graphs = false;
  int64_t cuda_graph_warmup = 3;
  // Memory format of a conv net's activations (NOTE [ Channels-last ] in
  // runtime/tensor/memory_format.h): true = channels-last (NHWC in memory, PyTorch's
  // torch.channels_last), false = NCHW, auto = channels-last on a GPU (cuDNN's NHWC kernels, what
  // tensor cores work in) and NCHW on the CPU, where our channels-last steps measured slower
  // (bench/RESULTS.md).
  std::string channels_last = "auto";
  // Mixed precision (NOTE [ Autocast policy ] in runtime/autograd/autocast.h): fp32 | bf16 |
  // fp16. bf16/fp16 run matmul, linear and conv in that dtype under autocast, with float32
  // parameters, gradients and optimiser state; fp16 turns loss scaling on unless
  // loss_scale.enabled says otherwise.
  std::string precision = "fp32";
  // A run whose optimiser step is skipped (non-finite gradient norm) this many times in a row has
  // diverged: it stops with an error instead of skipping forever.
  int64_t max_skipped_steps = 10;
  // NOTE [ CPU memory limit ] (runtime/backend/cpu/cpu_backend.h): CPU tensors beyond this many
  // GiB per process are refused with an error instead of the out-of-memory killer's silent kill;
  // 0: this node's usable memory (physical + swap, or its cgroup's limit when lower) divided by
  // the ranks on the node.
  double cpu_memory_limit_gib = 0;
};

struct DataConfig {
  std::string dataset = "fashion_mnist";  // fashion_mnist | image_folder | synthetic | text
  // fashion_mnist: the IDX files; image_folder: holds train/ and val/, one folder per class;
  // text: the token shards of `dptrain prepare-text` (its --out).
  std::string root = "/usr/share/datasets/fashion-mnist";
  int64_t batch_size = 128;
  int64_t eval_batch_size = 1000;
  bool shuffle = true;
  bool drop_last = false;
  int64_t loader_threads = 1;          // 0 = load on the training thread
  int64_t prefetch = 2;                // batches prepared ahead
  // Input normalisation (x/255 - mean) / std per channel: one value (Fashion-MNIST's single
  // channel, or every RGB channel) or three. Unset: the dataset's own (Fashion-MNIST's
  // 0.2860/0.3530, ImageNet's for image_folder and synthetic), filled in at load.
  std::vector<double> mean;
  std::vector<double> std;
  // image_folder and synthetic (NOTE [ Image pipeline ] in runtime/data/image_folder.h):
  int64_t image_size = 224;            // train: RandomResizedCrop output side
  std::vector<double> crop_scale = {0.08, 1.0};                 // its area range
  std::vector<double> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};      // its aspect-ratio range
  bool horizontal_flip = true;
  int64_t eval_resize_size = 256;      // eval: Resize (shorter side), then
  int64_t eval_image_size = 224;       //       CenterCrop
  bool jpeg_dct_scaling = true;        // decode JPEGs at 1/2, 1/4, 1/8 size where the crop allows
  bool skip_bad_files = false;         // unreadable images: skipped and counted instead of an error
  int64_t synthetic_train_size = 10000;  // synthetic: samples per split
  int64_t synthetic_eval_size = 1000;
  // text (BERT pretraining; NOTE [ Token batching ] in runtime/data/token_batching.h):
  std::string vocab;                   // vocab.txt the shards were made with; empty: root/vocab.txt
  std::string eval_root;               // the evaluation shards (empty: root/eval) or image folder (root/val)
  std::string batching = "fixed";      // fixed (batch_size rows per global step) | max_tokens
  int64_t max_tokens = 0;              // max_tokens: padded tokens per rank batch
  std::string balance = "sort_and_deal";  // none | sort_and_deal: equal work per rank in every step
  std::string packing = "none";        // none | greedy: several sequences per row
  int64_t max_seq_length = 0;          // longest sequence, the packed row length; 0: the shards'
  int64_t size_multiple = 8;           // max_tokens batch sizes a multiple of this
  int64_t pad_to_multiple = 8;         // padded lengths a multiple of this
  double mask_prob = 0.15;             // masked LM: share of the tokens predicted
  int64_t max_predictions = 0;         // per sequence; 0: ceil(mask_prob x max_seq_length)
};

struct ModelConfig {
  std::string name = "small_cnn";      // one of kModelNames (models/model_names.h)
  std::string size = "tiny";           // bert: one of BertConfig::preset_names()
  int64_t num_classes = 10;
  std::vector<int64_t> mlp_hidden = {1024, 1024};
  double dropout = 0.0;                // mlp; bert: hidden and attention-probability dropout
  bool zero_init_residual = false;     // resnet*: last BN of each residual branch starts at weight 0
  // A safetensors file of weights with torch's names (torchvision, Hugging Face, dptrain's own)
  // loaded over the initialisation, strictly; empty: none.
  std::string init_from;
};

// The optimizer section is the optimiser factory's own options struct (optim/optimizer_spec.h); the
// defaults that depend on optimizer.name are filled in when the config is loaded.
using OptimizerConfig = OptimizerSpec;

struct ScheduleConfig {
  std::string name = "constant";      // constant | step | cosine | poly | linear
  double warmup_epochs = 0.0;
  std::vector<double> step_epochs;    // milestones (epochs) for "step"
  double gamma = 0.1;
  double min_lr = 0.0;                // cosine floor; poly / linear end lr
  double power = 2.0;                 // poly exponent
  bool count_skipped_steps = true;    // false: a skipped (overflowed) step does not advance it
  // In optimiser steps, for recipes written in steps (MLPerf BERT): warmup_steps replaces
  // warmup_epochs; total_steps is where the decay ends (0: run.epochs × steps per epoch).
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
};

struct LossConfig {
  double label_smoothing = 0.0;
};

// Dynamic loss scaling (torch.cuda.amp.GradScaler's semantics and defaults; optim/grad_scaler.h).
struct LossScaleConfig {
  std::optional<bool> enabled;  // unset: on for run.precision fp16 (PyTorch AMP's recipe), else off
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

// Data-parallel training (issue 3). data.batch_size is the GLOBAL batch: each of the world's
// ranks takes batch_size / world_size of it.
struct DistributedConfig {
  std::string backend = "auto";        // auto (mpi for CPU tensors) | mpi
  double first_bucket_mb = 1.0;        // the first gradient bucket is small: it starts early
  double bucket_mb = 25.0;
  bool find_unused_parameters = false; // zero-fill parameters a step leaves without gradient
  std::string buffer_sync = "broadcast";  // BatchNorm statistics before evaluation: broadcast | average
  double timeout_s = 300;              // watchdog: a collective stuck this long aborts every rank (0: off)
  double checkpoint_timeout_s = 3600;  // watchdog: the others' wait for rank 0's checkpoint write (0: no limit)
  bool check_agreement = true;         // ranks compare each collective's fingerprint before running it
  std::string grad_dtype = "fp32";     // gradients on the wire: fp32 | bf16 (PyTorch's bf16_compress_hook)
  bool sync_batchnorm = false;         // BatchNorm statistics over the global batch (nn.SyncBatchNorm)
  // NOTE [ Fixed shards ] (launch/training_run.h): the global batch cut into this many shards,
  // each rank training world_size-th of them one after another; 0: one shard per rank.
  int64_t shards = 0;
};

// The autocast dtype run.precision names: kFloat32 (off), kBFloat16 or kFloat16.
DType autocast_dtype_of(const std::string& precision);

// MLPerf logging (docs/mllog.md): rank 0 writes :::MLLOG records when `mllog` names a file.
struct LoggingConfig {
  std::string mllog;                   // relative to run.output_dir; empty: off
  std::string benchmark = "resnet";    // resnet | bert: the rule set the hyperparameters follow
  std::string submission_org = "dptrain";
  std::string submission_platform;     // empty: "<world size>x<device kind>"
  std::string submission_division = "closed";  // closed | open
  std::string submission_status = "research";  // cloud | onprem | preview | research
};

struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  LossConfig loss;
  LossScaleConfig loss_scale;
  DistributedConfig distributed;
  LoggingConfig logging;

  // loss_scale.enabled as given, else on exactly for fp16.
  bool loss_scaling() const { return loss_scale.enabled.value_or(run.precision == "fp16"); }
};

// The schedule's length and warmup in steps, from the schedule keys (the trainer's LR schedule and
// the MLLOG hyperparameters both use it).
struct ScheduleSteps {
  int64_t total = 0;
  int64_t warmup = 0;
};
ScheduleSteps schedule_steps(const Config& config, int64_t steps_per_epoch);

// NOTE [ A schedule that does not fit its run ] (config.cpp): throws a dp::Error naming the keys
// when a decaying schedule's warmup does not end before the schedule does; else returns what the
// run should be told (a warmup that never ends, step milestones after the end), one line each.
std::vector<std::string> check_schedule_fits(const Config& config, int64_t steps_per_epoch);

// Loads `path` and applies overrides "section.key=value" (value parsed as YAML, so
// `model.mlp_hidden=[512,256]` works). Throws dp::Error with an actionable message.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from YAML text; `source_name` stands for the file in messages.
Config config_from_yaml_string(const std::string& yaml, const std::string& source_name,
                               const std::vector<std::string>& overrides = {});
// The fully resolved config, every key in section order; loading it gives back the same Config.
std::string to_yaml(const Config& config);

// Every key of to_yaml's output as "section.key" -> its value's text (to_yaml writes one key a
// line, lists in flow style): what two configurations' differences are listed by.
std::map<std::string, std::string> config_key_values(const std::string& yaml);

bool operator==(const Config& a, const Config& b);

}  // namespace dp
