#include "launch/trainer.h"

#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/ddp/reducer.h"
#include "runtime/core/hash.h"
#include "launch/datasets.h"
#include "launch/mllog.h"
#include "launch/step_profiler.h"
#include "launch/stop_signals.h"
#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/clip_grad.h"
#include "optim/grad_scaler.h"
#include "optim/registry.h"
#include "optim/shampoo.h"
#include "runtime/autograd/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/nn/tensor_core_shapes.h"
#include "runtime/data/batch_uploader.h"
#include "runtime/data/loader.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"

namespace dp {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Evaluation {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN();
};

// Sum over ranks of a few doubles (rank-0 reporting of whole-run figures).
std::vector<double> sum_over_ranks(ProcessGroup* group, std::vector<double> values, Device cpu) {
  if (!group || group->size() == 1) return values;
  Tensor t = from_vector<double>(values, {static_cast<int64_t>(values.size())}, cpu);
  group->all_reduce(t, CollectiveReduce::Sum)->wait();
  return t.to_vector<double>();
}

// Test-set loss and accuracy, with no autograd graph and the model in eval mode. Each rank
// evaluates its part of the test set (the loader's SequentialSampler shard) and the sums are
// added over `group`; they stay on the device until the end (one read, not one per batch).
// Evaluation runs in the training's precision (`autocast`: kFloat32 for off).
Evaluation evaluate(nn::Module& model, const ClassificationDataset& data, DataLoader& loader, BatchUploader& uploader,
                    Device device, DType autocast, ProcessGroup* group, Device cpu) {
  NoGradGuard no_grad;
  AutocastGuard amp(autocast);
  model.eval();
  loader.begin_epoch(0);
  Tensor loss_sum = zeros({}, kFloat64, device), correct = zeros({}, kFloat64, device);
  int64_t count = 0;
  while (std::optional<LoadedBatch> batch = loader.next()) {
    const Batch b = uploader.upload(*batch);
    Tensor logits = model.forward(data.model_input(b.images));
    loss_sum = add(loss_sum, cross_entropy(logits, b.labels, Reduction::Sum).to(kFloat64));
    Tensor hits = equal(argmax(logits, -1).to(kFloat32), b.labels.to(kFloat32));
    correct = add(correct, sum(hits).to(kFloat64));
    count += batch->size();
    uploader.release_host_buffers();
  }
  model.train();
  const std::vector<double> totals =
      sum_over_ranks(group, {loss_sum.item<double>(), correct.item<double>(), static_cast<double>(count)}, cpu);
  DP_CHECK(totals[2] > 0, "evaluation: the test set gave no batches");
  return {totals[0] / totals[2], totals[1] / totals[2]};
}

std::unique_ptr<LrSchedule> make_schedule(const Config& config, int64_t steps_per_epoch) {
  const ScheduleConfig& s = config.schedule;
  LrScheduleOptions o;
  o.base_lr = config.optimizer.lr;
  o.total_steps = config.run.epochs * steps_per_epoch;
  o.warmup_steps = static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
  o.gamma = s.gamma;
  o.min_lr = s.min_lr;
  o.power = s.power;
  for (double e : s.step_epochs) o.milestones.push_back(static_cast<int64_t>(std::llround(e * steps_per_epoch)));
  return make_lr_schedule(s.name, o);
}

// The training loader of a distributed run takes this rank's shard (disjoint across ranks each
// epoch) in batches of batch_size / world_size.
std::unique_ptr<DataLoader> make_loader(const Dataset& dataset, const DataConfig& d, Device cpu, bool train,
                                        uint64_t seed, HostAllocator host_allocator, int rank = 0,
                                        int world_size = 1) {
  std::unique_ptr<Sampler> sampler;
  if (train && world_size > 1) {
    DistributedSamplerOptions o;
    o.rank = rank;
    o.world_size = world_size;
    o.shuffle = d.shuffle;
    o.seed = seed;
    o.drop_last = d.drop_last;
    sampler = std::make_unique<DistributedSampler>(dataset.size(), o);
  } else if (train && d.shuffle) {
    sampler = std::make_unique<RandomSampler>(dataset.size(), seed);
  } else {
    sampler = std::make_unique<SequentialSampler>(dataset.size(), rank, world_size);  // eval: this rank's part
  }
  const int64_t batch = train ? d.batch_size / world_size : d.eval_batch_size;
  auto batches = std::make_unique<FixedSizeBatchSampler>(std::move(sampler), batch, train && d.drop_last);
  DataLoaderOptions options;
  options.num_threads = static_cast<int>(d.loader_threads);
  options.prefetch = static_cast<int>(d.prefetch) + 1;  // +1: the batch being trained on holds a slot
  options.host_allocator = std::move(host_allocator);
  return std::make_unique<DataLoader>(dataset, std::move(batches), cpu, options);
}

// a x b, or a dp::Error saying what overflowed.
int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  DP_CHECK(!__builtin_mul_overflow(a, b, &out), what, " (", a, " x ", b, ") overflows a 64-bit count");
  return out;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// NOTE [ Preflight ]
// Everything that would make a run train on nothing, never evaluate, wrap a count or allocate
// more than the machine has is checked here, before any buffer is allocated or step taken: a
// mistake costs seconds and names the keys to change, instead of a run that "succeeds" on zero
// steps or an out-of-memory kill with no message.
// A loss scale for messages: 65536, 1.5e+38.
std::string scale_text(double scale) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", scale);
  return text;
}

struct DataPlan {
  int64_t shard_size = 0;       // training samples this rank visits per epoch
  int64_t per_rank_batch = 0;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;      // epochs x steps, capped by run.max_steps
};

DataPlan plan_data(const Config& config, const ClassificationDataset& train_set, const ClassificationDataset& test_set,
                   int world_size) {
  const DataConfig& d = config.data;
  const int64_t n = train_set.size();
  DP_CHECK(n > 0, "the training set (", train_set.description(), ") has no samples: there is nothing to train on");
  DP_CHECK(test_set.size() > 0, "the test set (", test_set.description(), ") has no samples: the run could not be "
           "evaluated");
  DP_CHECK(config.model.num_classes >= train_set.num_classes(), "model.num_classes is ", config.model.num_classes,
           " but ", config.data.dataset, " has ", train_set.num_classes(), " classes (labels 0..",
           train_set.num_classes() - 1, "): set model.num_classes to at least ", train_set.num_classes());
  DataPlan plan;
  plan.per_rank_batch = d.batch_size / world_size;
  // DistributedSampler's shard (PyTorch's semantics): padded up to a multiple of the world size,
  // or cut down with drop_last.
  plan.shard_size = world_size == 1 ? n : d.drop_last ? n / world_size : n / world_size + (n % world_size != 0);
  plan.steps_per_epoch = d.drop_last ? plan.shard_size / plan.per_rank_batch
                                     : plan.shard_size / plan.per_rank_batch + (plan.shard_size % plan.per_rank_batch != 0);
  if (plan.steps_per_epoch == 0) {
    std::ostringstream os;
    os << "data.batch_size " << d.batch_size;
    if (world_size > 1) os << " (" << plan.per_rank_batch << " per rank on " << world_size << " ranks)";
    os << " is larger than the " << plan.shard_size << " training samples "
       << (world_size > 1 ? "of each rank's shard " : "") << "and data.drop_last is true, so an epoch has no full "
       << "batch and the run would train on nothing: lower data.batch_size to at most "
       << plan.shard_size * world_size << " or set data.drop_last: false";
    throw Error(os.str());
  }
  plan.total_steps = checked_product(config.run.epochs, plan.steps_per_epoch, "run.epochs x steps per epoch");
  if (config.run.max_steps > 0) plan.total_steps = std::min(plan.total_steps, config.run.max_steps);

  // The loaders' buffers: (prefetch + 1) batches each, of at most the samples the split has.
  const int64_t slots = d.prefetch + 1;
  const double train_bytes = static_cast<double>(std::min(plan.per_rank_batch, plan.shard_size)) *
                             static_cast<double>(train_set.sample_bytes()) * slots;
  const double test_bytes = static_cast<double>(std::min(d.eval_batch_size, test_set.size())) *
                            static_cast<double>(test_set.sample_bytes()) * slots;
  const double memory = physical_memory_bytes();
  if (memory > 0 && train_bytes + test_bytes > memory / 2) {
    char text[400];
    std::snprintf(text, sizeof text,
                  "the data loaders' batch buffers would take %.1f GiB (data.batch_size %lld, data.eval_batch_size "
                  "%lld, data.prefetch %lld: (prefetch + 1) batches each), more than half of this machine's %.1f "
                  "GiB of memory: lower data.prefetch or the batch sizes",
                  (train_bytes + test_bytes) / 1073741824.0, static_cast<long long>(d.batch_size),
                  static_cast<long long>(d.eval_batch_size), static_cast<long long>(d.prefetch),
                  memory / 1073741824.0);
    throw Error(text);
  }
  return plan;
}

const char* loss_text(double v) { return std::isnan(v) ? "nan" : v > 0 ? "+inf" : "-inf"; }

// NOTE [ Divergence checks ]
// A diverged run must stop with an error, not print `loss nan` until it "succeeds". The losses
// stay on the device (no per-step sync): they are summed, and the sum is read every few steps
// (with the progress report, at most kLossCheckEvery steps apart); only when it is not finite are
// the window's losses read one by one to name the first bad step. A run of
// run.max_skipped_steps consecutive skipped steps (non-finite gradient norm) is also divergence.
constexpr int64_t kLossCheckEvery = 100;

class LossWatch {
 public:
  LossWatch(Device device) : device_(device) { reset(); }

  void add(const Tensor& loss, int64_t step) {
    NoGradGuard no_grad;
    if (losses_.empty()) first_step_ = step;
    losses_.push_back(loss.detach());
    sum_ = dp::add(sum_, loss.detach());
  }
  // Throws when a loss since the last check was not finite.
  void check(int64_t steps_per_epoch) {
    if (losses_.empty()) return;
    if (!std::isfinite(sum_.item<double>())) {
      for (size_t i = 0; i < losses_.size(); ++i) {
        const double v = losses_[i].item<double>();
        if (std::isfinite(v)) continue;
        const int64_t step = first_step_ + static_cast<int64_t>(i);  // 1-based
        throw Error("step " + std::to_string(step) + " (epoch " + std::to_string((step - 1) / steps_per_epoch + 1) +
                    "): the training loss is " + loss_text(v) + ": the run has diverged. Lower optimizer.lr, add "
                    "warmup (schedule.warmup_epochs) or gradient clipping (optimizer.clip_grad_norm)");
      }
    }
    reset();
  }

 private:
  void reset() {
    losses_.clear();
    sum_ = zeros({}, kFloat32, device_);
  }

  Device device_;
  std::vector<Tensor> losses_;
  Tensor sum_;
  int64_t first_step_ = 0;
};

// NOTE [ Stopping on a signal ] (launch/stop_signals.h): the ranks' vote on stopping, read one
// step after it was cast.
class StopVote {
 public:
  StopVote(const StopSignals* signals, ProcessGroup* group, Device cpu) : signals_(signals), group_(group), cpu_(cpu) {}

  // Called after every step on every rank; returns the signal to stop for, or 0.
  int after_step() {
    if (!signals_) return 0;
    if (!group_ || group_->size() == 1) return signals_->received();
    if (const int agreed = read()) return agreed;
    const int mine = signals_->received();
    ballot_ = from_vector<double>({mine == SIGTERM ? 1.0 : 0.0, mine == SIGINT ? 1.0 : 0.0}, {2}, cpu_);
    pending_ = group_->all_reduce(ballot_, CollectiveReduce::Sum);
    return 0;
  }
  // Completes the vote in flight (every rank has one after its last step).
  void finish() { read(); }

 private:
  int read() {
    if (!pending_) return 0;
    pending_->wait();
    pending_.reset();
    const std::vector<double> votes = ballot_.to_vector<double>();
    return votes[0] > 0 ? SIGTERM : votes[1] > 0 ? SIGINT : 0;
  }

  const StopSignals* signals_;
  ProcessGroup* group_;
  Device cpu_;
  Tensor ballot_;
  std::shared_ptr<Work> pending_;
};

}  // namespace

void check_same_config_on_every_rank(const Config& config, ProcessGroup& group, Device cpu) {
  const std::string text = to_yaml(config);
  const uint64_t h = Fnv1a().text(text).value();
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(h)}, {1}, cpu);
  Tensor all = empty({group.size()}, kInt64, cpu);
  group.all_gather(mine, all)->wait();
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  std::string differ;
  for (int r = 1; r < group.size(); ++r)
    if (hashes[r] != hashes[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  DP_CHECK(differ.empty(), "rank(s) ", differ, " resolved a different configuration from rank 0 (config file or --set "
           "overrides differ between ranks); every rank must run the same recipe");
}

// NOTE [ Distributed runs ]
// Every rank builds the same model from the same seed; rank 0's parameters and buffers are then
// broadcast (after a check that all ranks built the same structure). Each step a rank trains on
// its shard of the global batch; the Reducer (comm/ddp/reducer.h) averages the gradients,
// overlapping bucket all-reduces with backward, so the optimiser sees the same gradient on
// every rank and the replicas stay equal. The "comm" phase of the step profile is the exposed
// communication: the wait in Reducer::finish() after backward. Before evaluating, BatchNorm
// buffers are made equal (distributed.buffer_sync) and rank 0 evaluates the whole test set; only
// rank 0 prints and writes files.
namespace {

// The MLLOG record of one run (NOTE [ MLLOG call order ] in launch/mllog.h): rank 0's logger
// (disabled elsewhere, and without logging.mllog) and whether run_stop was written, so that a run
// ended by an error still closes its log.
struct MllogRun {
  MlLogger log;
  bool stopped = false;

  void stop(bool success) {
    if (!log.enabled() || stopped) return;
    log.end(mllog::kRunStop, nullptr, {{"status", success ? "success" : "aborted"}});
    stopped = true;
  }
};

double mllog_quality_target(const std::string& benchmark) { return benchmark == "bert" ? 0.720 : 0.759; }

TrainReport run_training(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics,
                         ProcessGroup* group, const std::string& device_name, ProcessGroup* device_group,
                         const StopSignals* stop_signals, MllogRun& mllog, int64_t& step) {
  const Device device = runtime.device(device_name.empty() ? config.run.device : device_name);
  const Device cpu = runtime.cpu();
  const int world_size = group ? group->size() : 1, rank = group ? group->rank() : 0;
  if (world_size > 1) {
    DP_CHECK(config.data.batch_size % world_size == 0, "data.batch_size ", config.data.batch_size,
             " is the global batch and must be divisible by the world size ", world_size, " (each rank takes ",
             "batch_size / world_size); choose a multiple of ", world_size);
    DP_CHECK(device.is_cpu() || (device_group != nullptr && device_group->size() == world_size), "train: ",
             device.str(), " on ", world_size, " ranks needs a process group for GPU tensors (NCCL) over the ",
             "same ranks");
  }
  // Collectives on the model's tensors: the MPI group on the CPU, NCCL on a GPU.
  ProcessGroup* model_group = device.is_cpu() ? group : device_group;

  // NOTE [ MLLOG call order ] (launch/mllog.h): the submission, then init until run_start.
  if (mllog.log.enabled()) {
    const std::string platform = config.logging.submission_platform.empty()
                                     ? std::to_string(world_size) + "x" + (device.is_cpu() ? "cpu" : "gpu")
                                     : config.logging.submission_platform;
    const MlSubmission submission{config.logging.submission_org, platform, config.logging.submission_division,
                                  config.logging.submission_status, parse_mllog_benchmark(config.logging.benchmark)};
    for (const MlRecord& r : mllog_submission_records(submission)) mllog.log.event(r.key, r.value);
    mllog.log.event(mllog::kCacheClear, true);
    mllog.log.start(mllog::kInitStart);
  }

  // ---- Data ----
  const TrainAndEvalData data = make_datasets(config);  // data.dataset (launch/datasets.h)
  const ClassificationDataset& train_set = *data.train;
  const ClassificationDataset& test_set = *data.eval;
  const DataPlan plan = plan_data(config, train_set, test_set, world_size);  // NOTE [ Preflight ]
  // NOTE [ Batch upload ]: on a GPU the loaders fill pinned buffers that are copied
  // asynchronously; on the CPU batches are used where they were filled.
  std::unique_ptr<BatchUploader> train_uploader = make_batch_uploader(device, cpu);
  std::unique_ptr<BatchUploader> test_uploader = make_batch_uploader(device, cpu);
  std::unique_ptr<DataLoader> train_loader = make_loader(train_set, config.data, cpu, true, config.run.seed,
                                                         train_uploader->host_allocator(), rank, world_size);
  std::unique_ptr<DataLoader> test_loader = make_loader(test_set, config.data, cpu, false, config.run.seed,
                                                        test_uploader->host_allocator(), rank, world_size);

  // ---- Model, optimiser, schedule ----
  Generator init_gen(config.run.seed);
  ModelSpec spec;
  spec.name = config.model.name;
  spec.num_classes = config.model.num_classes;
  spec.in_channels = train_set.input_shape()[0];
  spec.image_size = train_set.input_shape()[1];
  spec.mlp_hidden = config.model.mlp_hidden;
  spec.dropout = config.model.dropout;
  spec.zero_init_residual = config.model.zero_init_residual;
  std::shared_ptr<nn::Module> model = build_model(spec, device, init_gen);
  model->train();
  std::unique_ptr<Reducer> reducer;
  if (world_size > 1) {
    broadcast_model_from_rank0(*model, *model_group);
    ReducerOptions ro;
    ro.first_bucket_bytes = static_cast<int64_t>(config.distributed.first_bucket_mb * (1 << 20));
    ro.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * (1 << 20));
    ro.find_unused_parameters = config.distributed.find_unused_parameters;
    if (config.distributed.grad_dtype == "bf16") ro.wire_dtype = kBFloat16;
    reducer = std::make_unique<Reducer>(model->named_parameters(), *model_group, ro);
  }
  int64_t num_params = 0;
  for (const Tensor& p : model->parameters()) num_params += p.numel();

  std::unique_ptr<Optimizer> optimizer =
      make_optimizer(config.optimizer, model->named_parameters(),
                     OptimizerContext{group, cpu, static_cast<int>(config.run.threads)});
  const std::vector<Tensor> parameters = model->parameters();
  // No begin_epoch here: the loader would start reading training data before run_start.
  const int64_t steps_per_epoch = train_loader->num_batches();
  DP_CHECK(steps_per_epoch == plan.steps_per_epoch, "train: the loader plans ", steps_per_epoch,
           " steps per epoch, the preflight ", plan.steps_per_epoch);
  std::unique_ptr<LrSchedule> schedule = make_schedule(config, steps_per_epoch);
  // NOTE [ Schedule clock ] (optim/lr_schedule.h): on the device, advanced only by applied steps
  // when schedule.count_skipped_steps is false.
  ScheduleClock clock(*schedule, config.run.epochs * steps_per_epoch, device, config.schedule.count_skipped_steps);
  // NOTE [ Loss scaling on the device ] (optim/grad_scaler.h): on for fp16 unless loss_scale.enabled
  // says otherwise, off for fp32 and bf16 unless it says so.
  GradScalerOptions scaler_options;
  scaler_options.enabled = config.loss_scaling();
  scaler_options.init_scale = config.loss_scale.init_scale;
  scaler_options.growth_factor = config.loss_scale.growth_factor;
  scaler_options.backoff_factor = config.loss_scale.backoff_factor;
  scaler_options.growth_interval = config.loss_scale.growth_interval;
  GradScaler scaler(device, scaler_options);
  // run.precision: forward and loss under autocast (NOTE [ Autocast policy ]); backward follows
  // the dtypes the forward chose; parameters, gradients and optimiser state stay float32.
  const DType autocast = autocast_dtype_of(config.run.precision);

  {
    std::ostringstream os;
    os << "model " << config.model.name << ": " << num_params << " parameters on " << device.str() << "; "
       << train_set.size() << " training / " << test_set.size() << " test samples, " << steps_per_epoch
       << " steps per epoch";
    if (autocast != kFloat32)
      os << "\nmixed precision: " << config.run.precision << " autocast, float32 master weights, loss scaling "
         << (scaler.enabled() ? "on" : "off");
    if (device.is_cuda() && (autocast != kFloat32 || config.run.allow_tf32)) {
      // NOTE [ Tensor-core shapes ]: said once, the model left as built.
      const std::vector<nn::ShapeAdvice> advice = nn::tensor_core_shape_advice(*model);
      const int64_t per_rank = config.data.batch_size / world_size;
      if (!advice.empty())
        os << "\ntensor cores: dimensions not a multiple of 8 take slower paths: " << nn::describe(advice);
      if (per_rank % 8 != 0)
        os << "\ntensor cores: the batch per rank (" << per_rank << ") is not a multiple of 8";
    }
    if (world_size > 1)
      os << "\ndata-parallel over " << world_size << " ranks (" << group->backend_name() << "): batch "
         << config.data.batch_size / world_size << " per rank, " << reducer->buckets().size() << " gradient buckets"
         << (model_group != group ? std::string(" (") + model_group->backend_name() + ")" : "")
         << (config.distributed.grad_dtype == "bf16" ? ", sent as bf16" : "");
    console.line(os.str());
  }
  if (metrics)
    metrics->write({{"event", "start"}, {"model", config.model.name}, {"parameters", num_params},
                    {"device", device.str()}, {"threads", config.run.threads}, {"steps_per_epoch", steps_per_epoch},
                    {"world_size", world_size}, {"precision", config.run.precision},
                    {"grad_dtype", config.distributed.grad_dtype}});

  // On a terminal the progress line is redrawn often; in a log, every log_every steps.
  const int64_t report_every =
      console.terminal() ? std::max<int64_t>(1, std::min<int64_t>(config.run.log_every, 10)) : config.run.log_every;

  TrainReport report;
  StepProfiler profiler(&device.backend());  // NOTE [ Step timing on a GPU ]
  // Communication over the run and since the last report (distributed runs).
  double run_comm_ms = 0, run_exposed_ms = 0, window_comm_ms = 0, window_exposed_ms = 0;
  int64_t synced_steps = 0, window_synced = 0;
  std::map<int, int64_t> last_bucket_counts;
  step = 0;
  bool stop = false;
  int stop_signal = 0;  // NOTE [ Stopping on a signal ]
  StopVote stop_vote(stop_signals, group, cpu);
  LossWatch loss_watch(device);  // NOTE [ Divergence checks ]
  const int64_t check_every = std::min(report_every, kLossCheckEvery);
  // NOTE [ Divergence checks ]: the skipped-step run is read when it could first have reached
  // run.max_skipped_steps, so the run is caught at exactly that length.
  int64_t next_skip_check = config.run.max_skipped_steps;
  int64_t skipped_at_last_report = 0;  // the window's skips are those since then
  const double target = config.run.target_accuracy;
  if (mllog.log.enabled()) {
    MlRunFacts facts;
    facts.steps_per_epoch = steps_per_epoch;
    facts.per_rank_batch = plan.per_rank_batch;
    facts.train_samples = train_set.size();
    facts.eval_samples = test_set.size();
    for (const MlRecord& r : mllog_hyperparameters(parse_mllog_benchmark(config.logging.benchmark), config, facts))
      mllog.log.event(r.key, r.value);
    mllog.log.end(mllog::kInitStop);
    mllog.log.start(mllog::kRunStart);  // the clock starts; no data has been read yet
  }
  for (int64_t epoch = 1; epoch <= config.run.epochs && !stop; ++epoch) {
    mllog.log.start(mllog::kEpochStart, nullptr, {{"epoch_num", epoch}});
    train_loader->begin_epoch(epoch - 1);
    profiler.reset();
    const Clock::time_point epoch_start = Clock::now();
    Clock::time_point window_start = epoch_start;
    Tensor window_loss = zeros({}, kFloat32, device);  // summed on the device: no per-step sync
    Tensor epoch_loss = zeros({}, kFloat64, device);
    int64_t window_steps = 0, window_samples = 0, epoch_samples = 0, step_in_epoch = 0;
    while (true) {
      profiler.begin(Phase::Data);
      std::optional<LoadedBatch> batch = train_loader->next();
      if (!batch) break;
      const Batch on_device = train_uploader->upload(*batch);
      const Tensor& labels = on_device.labels;
      const Tensor images = train_set.model_input(on_device.images);  // uint8 → normalised float32 on the device
      const int64_t batch_size = batch->size();

      const Tensor& lr = clock.next_lr();  // on the device: NOTE [ Schedule clock ]
      profiler.begin(Phase::Forward);
      Tensor loss;
      {
        AutocastGuard amp(autocast);
        const Tensor logits = model->forward(images);
        loss = cross_entropy(logits, labels, Reduction::Mean, -100, config.loss.label_smoothing);  // float32
      }
      profiler.begin(Phase::Backward);
      if (reducer) reducer->prepare_for_backward(/*sync=*/true);
      scaler.scale(loss).backward();
      if (reducer) {
        profiler.begin(Phase::Comm);
        const ReducerStepStats cs = reducer->finish();
        run_comm_ms += cs.comm_ms;
        run_exposed_ms += cs.exposed_ms;
        window_comm_ms += cs.comm_ms;
        window_exposed_ms += cs.exposed_ms;
        ++synced_steps;
        ++window_synced;
        ++last_bucket_counts[cs.last_bucket];
      }
      profiler.begin(Phase::Optimizer);
      // Loss scaling: the gradients are unscaled after the all-reduce (every rank then takes the
      // same decision) and before clipping (which sees the true norm). A gradient overflow (a
      // non-finite value found by the scaler, or a non-finite global norm when clipping) sets the
      // step's found_inf and the optimiser's kernels skip the update; the schedule clock and the
      // skip counters read the same verdict, all on the device (NOTE [ Device-resident optimiser
      // step ] in optim/optimizer.h). Skips are counted, and read between steps.
      scaler.unscale(parameters);
      if (config.optimizer.clip_grad_norm > 0)
        clip_grad_norm_on_device_(parameters, config.optimizer.clip_grad_norm, scaler.found_inf());
      scaler.step(*optimizer, lr);
      clock.step_done(scaler.found_inf());
      scaler.update();
      optimizer->zero_grad(/*set_to_none=*/true);
      profiler.end();
      profiler.step_done();
      train_uploader->release_host_buffers();
      batch.reset();  // hand the buffers back to the loader

      {
        NoGradGuard no_grad;
        window_loss = add(window_loss, loss.detach());
        epoch_loss = add(epoch_loss, loss.detach().to(kFloat64));
      }
      ++step;
      ++step_in_epoch;
      loss_watch.add(loss, step);
      ++window_steps;
      window_samples += batch_size;
      epoch_samples += batch_size;
      stop = config.run.max_steps > 0 && step >= config.run.max_steps;
      const bool report = step_in_epoch % report_every == 0 || step_in_epoch == steps_per_epoch || stop;
      if (report || step_in_epoch % check_every == 0) loss_watch.check(steps_per_epoch);
      if (step >= next_skip_check) {
        const int64_t run = scaler.skipped_in_a_row();
        if (run >= config.run.max_skipped_steps) {
          const std::string why = scaler.enabled() ? "non-finite gradients at every loss scale down to " +
                                                         scale_text(scaler.get_scale())
                                                   : std::string("non-finite gradient norm");
          throw Error("step " + std::to_string(step) + " (epoch " + std::to_string(epoch) +
                      "): the optimiser step was skipped " + std::to_string(run) + " times in a row (" + why +
                      "): the run has diverged (run.max_skipped_steps is " +
                      std::to_string(config.run.max_skipped_steps) +
                      "). Lower optimizer.lr or add warmup (schedule.warmup_epochs)");
        }
        next_skip_check = step + (config.run.max_skipped_steps - run);
      }
      if (report) {
        StepStatus s;
        s.epoch = epoch;
        s.epochs = config.run.epochs;
        s.step = step_in_epoch;
        s.steps = steps_per_epoch;
        s.loss = window_loss.item<double>() / static_cast<double>(window_steps);
        s.samples_per_second = static_cast<double>(window_samples * world_size) / seconds_since(window_start);
        s.lr = clock.lr();  // this step's lr (a host read, with the loss's)
        const int64_t skipped_now = scaler.skipped_steps();
        const int64_t window_skipped = skipped_now - skipped_at_last_report;
        if (!scaler.enabled() && window_skipped > 0)  // under loss scaling skips are routine
          console.line(std::to_string(window_skipped) + " optimiser step(s) skipped up to step " +
                       std::to_string(step) + ": the gradient norm was not finite");
        console.step(s);
        if (metrics && (step_in_epoch % config.run.log_every == 0 || stop)) {
          nlohmann::json phases;
          for (int p = 0; p < static_cast<int>(Phase::kCount); ++p)
            phases[phase_name(static_cast<Phase>(p))] = profiler.ms_per_step(static_cast<Phase>(p));
          nlohmann::json rec = {{"event", "step"}, {"epoch", epoch}, {"step", step}, {"loss", s.loss}, {"lr", s.lr},
                                {"samples_per_second", s.samples_per_second}, {"ms_per_step", phases}};  // global
          if (scaler.enabled()) rec["loss_scale"] = {{"scale", scaler.get_scale()}, {"skipped_steps", window_skipped}};
          if (window_synced > 0 && !device.is_cpu())  // NCCL: only the exposed part is measured (device time)
            rec["comm"] = {{"exposed_ms", profiler.ms_per_step(Phase::Comm)}};
          else if (window_synced > 0)
            rec["comm"] = {{"comm_ms", window_comm_ms / window_synced},
                           {"exposed_ms", window_exposed_ms / window_synced},
                           {"hidden_pct", window_comm_ms > 0 ? 100.0 * (1.0 - window_exposed_ms / window_comm_ms) : 100.0}};
          metrics->write(rec);
        }
        window_comm_ms = window_exposed_ms = 0;
        window_synced = 0;
        window_loss = zeros({}, kFloat32, device);
        window_steps = window_samples = 0;
        skipped_at_last_report = skipped_now;
        window_start = Clock::now();
      }
      if ((stop_signal = stop_vote.after_step())) break;
      if (stop) break;
    }
    if (stop_signal) {
      console.line(std::string("stopped by ") + StopSignals::name(stop_signal) + " after step " + std::to_string(step) +
                   " (epoch " + std::to_string(epoch) + ", step " + std::to_string(step_in_epoch) + " of " +
                   std::to_string(steps_per_epoch) + "); no evaluation");
      break;
    }

    mllog.log.end(mllog::kEpochStop, nullptr, {{"epoch_num", epoch}});
    EpochReport e;
    e.epoch = epoch;
    e.train_seconds = seconds_since(epoch_start);
    // Mean over ranks of each rank's mean loss; samples counted over all ranks.
    const std::vector<double> totals = sum_over_ranks(
        group, {epoch_loss.item<double>() / static_cast<double>(std::max<int64_t>(step_in_epoch, 1)),
                static_cast<double>(epoch_samples)},
        cpu);
    e.train_loss = totals[0] / world_size;
    e.samples_per_second = totals[1] / e.train_seconds;
    Evaluation eval;
    // run.eval_every / eval_offset (MLPerf's evaluation schedule); always after the last epoch.
    const bool scheduled = config.run.eval_every_epoch && (epoch + config.run.eval_offset) % config.run.eval_every == 0;
    if (scheduled || epoch == config.run.epochs || stop) {
      if (world_size > 1)
        sync_buffers(*model, *model_group,
                     config.distributed.buffer_sync == "average" ? BufferSync::Average : BufferSync::Broadcast);
      mllog.log.start(mllog::kEvalStart, nullptr, {{"epoch_num", epoch}});
      eval = evaluate(*model, test_set, *test_loader, *test_uploader, device, autocast, group, cpu);
      mllog.log.event(mllog::kEvalAccuracy, eval.accuracy, {{"epoch_num", epoch}});
      mllog.log.end(mllog::kEvalStop, nullptr, {{"epoch_num", epoch}});
      if (target > 0 && eval.accuracy >= target) {
        report.reached_target = true;
        stop = true;  // every rank saw the same reduced accuracy
      }
    }
    e.test_loss = eval.loss;
    e.test_accuracy = eval.accuracy;
    report.epochs.push_back(e);

    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(4);
    os << "epoch " << epoch << "/" << config.run.epochs << ": train loss " << e.train_loss;
    if (!std::isnan(e.test_accuracy)) {
      os.precision(2);
      os << ", test accuracy " << 100.0 * e.test_accuracy << " %";
      os.precision(4);
      os << " (loss " << e.test_loss << ")";
    }
    os.precision(1);
    os << ", " << e.train_seconds << " s, " << e.samples_per_second << " samples/s";
    console.line(os.str());
    profiler.flush();
    console.line("  step time: " + profiler.summary());
    // data.skip_bad_files: this rank's count (each rank reads its own shard's files).
    const auto [skipped, first_skipped] = skipped_files(train_set);
    if (skipped > 0)
      console.line("  " + std::to_string(skipped) + " unreadable training file(s) skipped so far (data.skip_bad_files), "
                   "the first: " + first_skipped);
    if (report.reached_target) {
      std::ostringstream t;
      t.setf(std::ios::fixed);
      t.precision(2);
      t << "target accuracy " << 100.0 * target << " % reached after epoch " << epoch << ": stopping";
      console.line(t.str());
    }
    if (metrics) {
      nlohmann::json rec = {{"event", "epoch"},          {"epoch", epoch},
                            {"train_loss", e.train_loss}, {"seconds", e.train_seconds},
                            {"samples_per_second", e.samples_per_second}, {"peak_rss_mib", peak_rss_mib()}};
      if (!std::isnan(e.test_accuracy)) {
        rec["test_accuracy"] = e.test_accuracy;
        rec["test_loss"] = e.test_loss;
      }
      if (skipped > 0) rec["skipped_files"] = skipped;
      metrics->write(rec);
    }
  }
  if (!stop_signal) stop_vote.finish();  // the vote cast after the last step
  report.steps = step;
  report.stop_signal = stop_signal;
  report.peak_rss_mib = peak_rss_mib();
  {
    Fnv1a digest;
    auto add = [&](const auto& named) {
      for (const auto& [n, t] : named) {
        const Tensor host = t.to(cpu).contiguous();
        digest.text(n).bytes(host.raw_data(), host.nbytes());
      }
    };
    add(model->named_parameters());
    add(model->named_buffers());
    report.model_digest = digest.value();
  }
  if (synced_steps > 0) {
    CommReport& c = report.comm;
    c.comm_ms = run_comm_ms / synced_steps;
    c.exposed_ms = run_exposed_ms / synced_steps;
    c.hidden_fraction = run_comm_ms > 0 ? 1.0 - run_exposed_ms / run_comm_ms : 1.0;
    c.buckets = static_cast<int>(reducer->buckets().size());
    int64_t best = -1;
    for (const auto& [bucket, count] : last_bucket_counts)
      if (count > best) best = count, c.most_often_last_bucket = bucket;
    char line[300];
    if (device.is_cpu()) {
      std::snprintf(line, sizeof line,
                    "communication: %.2f ms/step, %.2f ms exposed (%.1f %% hidden behind backward); "
                    "last bucket to finish: %d of %d (most often)",
                    c.comm_ms, c.exposed_ms, 100.0 * c.hidden_fraction, c.most_often_last_bucket, c.buckets);
    } else {
      // NCCL waits are stream-ordered: the host never sees a collective end, so the reducer's
      // host-clock figures mean nothing here. The exposed part is the profiler's comm phase, timed
      // on the device; the total NCCL time (and so the hidden share) is not measured yet.
      c.comm_ms = c.hidden_fraction = std::numeric_limits<double>::quiet_NaN();
      c.exposed_ms = profiler.ms_per_step(Phase::Comm);
      std::snprintf(line, sizeof line,
                    "communication (NCCL): %.2f ms/step exposed (device time, last epoch); %d buckets; the total "
                    "NCCL time, and so the share hidden behind backward, is not measured on GPUs yet",
                    c.exposed_ms, c.buckets);
    }
    console.line(line);
  }
  report.skipped_steps = scaler.skipped_steps();
  // Shampoo's cost is its roots: say how many, how many failed, and rank 0's share of the time.
  if (scaler.enabled())
    console.line("loss scale " + scale_text(scaler.get_scale()) + " at the end; " +
                 std::to_string(report.skipped_steps) + " of " + std::to_string(step) +
                 " optimiser steps skipped for a gradient overflow");
  const auto* shampoo = dynamic_cast<const Shampoo*>(optimizer.get());
  if (shampoo) {
    char line[300];
    std::snprintf(line, sizeof line,
                  "shampoo: %lld root computations, %lld failed roots kept their previous inverse; this rank "
                  "computed %zu of %zu blocks' roots in %.2f s (%.2f s gathering them)",
                  static_cast<long long>(shampoo->root_computations()), static_cast<long long>(shampoo->root_failures()),
                  shampoo->local_blocks(), shampoo->blocks().size(), shampoo->root_seconds(),
                  shampoo->root_comm_seconds());
    console.line(line);
  }
  if (metrics) {
    char digest[24];
    std::snprintf(digest, sizeof digest, "%016llx", static_cast<unsigned long long>(report.model_digest));
    const char* reason = stop_signal                                                ? StopSignals::name(stop_signal)
                         : report.reached_target                                    ? "target_reached"
                         : config.run.max_steps > 0 && step >= config.run.max_steps ? "max_steps"
                                                                                     : "completed";
    nlohmann::json rec = {{"event", "end"}, {"reason", reason}, {"steps", step},
                          {"peak_rss_mib", report.peak_rss_mib}, {"model_digest", digest}};
    if (scaler.enabled()) rec["loss_scale"] = {{"scale", scaler.get_scale()}, {"skipped_steps", report.skipped_steps}};
    if (shampoo)
      rec["shampoo"] = {{"root_computations", shampoo->root_computations()},
                        {"root_failures", shampoo->root_failures()},
                        {"local_blocks", shampoo->local_blocks()},
                        {"root_seconds", shampoo->root_seconds()},
                        {"root_comm_seconds", shampoo->root_comm_seconds()}};
    if (synced_steps > 0)
      rec["comm"] = {{"comm_ms", report.comm.comm_ms}, {"exposed_ms", report.comm.exposed_ms},
                     {"hidden_pct", 100.0 * report.comm.hidden_fraction},
                     {"most_often_last_bucket", report.comm.most_often_last_bucket}};
    metrics->write(rec);
  }
  // MLPerf's success: the quality target reached (run.target_accuracy, else the benchmark's).
  mllog.stop(report.reached_target ||
             (target == 0 && !report.epochs.empty() &&
              report.epochs.back().test_accuracy >= mllog_quality_target(config.logging.benchmark)));
  return report;
}

}  // namespace

TrainReport train(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics,
                  ProcessGroup* group, const std::string& device, ProcessGroup* device_group,
                  const StopSignals* stop_signals) {
  int64_t step = 0;
  MllogRun mllog;
  if (!config.logging.mllog.empty() && (!group || group->rank() == 0))
    mllog.log = MlLogger((std::filesystem::path(config.run.output_dir) / config.logging.mllog).string());
  try {
    return run_training(config, runtime, console, metrics, group, device, device_group, stop_signals, mllog, step);
  } catch (const std::exception& e) {
    try {
      mllog.stop(false);  // aborted
    } catch (const std::exception&) {
    }
    // The metrics file ends with why the run ended, errors included (a write failure here must
    // not hide the error itself).
    if (metrics) {
      try {
        metrics->write({{"event", "end"}, {"reason", "error"}, {"steps", step}, {"error", e.what()}});
      } catch (const std::exception&) {
      }
    }
    throw;
  }
}

std::string metrics_path(const Config& config) {
  return (std::filesystem::path(config.run.output_dir) / config.run.metrics_file).string();
}

}  // namespace dp
