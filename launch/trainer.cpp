#include "launch/trainer.h"

#include <sys/resource.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "comm/ddp/reducer.h"
#include "runtime/core/hash.h"
#include "launch/datasets.h"
#include "launch/graphed_step.h"
#include "launch/metrics_log.h"
#include "launch/mllog.h"
#include "launch/run_checkpoint.h"
#include "launch/step_profiler.h"
#include "launch/training_run.h"
#include "launch/stop_signals.h"
#include "launch/version.h"
#include "optim/shampoo.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/core/host_sync.h"
#include "runtime/core/nvtx.h"
#include "runtime/io/tensor_file.h"
#include "runtime/nn/tensor_core_shapes.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace dp {

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A loss scale for messages: 65536, 1.5e+38.
std::string scale_text(double scale) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", scale);
  return text;
}

const char* loss_text(double v) { return std::isnan(v) ? "nan" : v > 0 ? "+inf" : "-inf"; }

// NOTE [ Divergence checks ]
// A diverged run must stop with an error, not print `loss nan` until it "succeeds". The losses
// stay on the device (no per-step sync): they are summed, and the sum is read every few steps
// (with the progress report, at most kLossCheckEvery steps apart); only when it is not finite are
// the window's losses read one by one to name the first bad step. A run of
// run.max_skipped_steps consecutive skipped steps (non-finite gradient norm) is also divergence.
constexpr int64_t kLossCheckEvery = 100;

// What to try after a divergence: the usual remedies, and the recipe's own values that are known
// to diverge (eps 0 divides a parameter's zero second moment by zero; gamma > 1 raises the
// learning rate at every milestone).
std::string divergence_advice(const Config& config) {
  std::string advice = "Lower optimizer.lr, add warmup (schedule.warmup_epochs) or gradient clipping "
                       "(optimizer.clip_grad_norm)";
  const OptimizerConfig& o = config.optimizer;
  if ((o.name == "adamw" || o.name == "lamb") && o.eps && *o.eps == 0)
    advice += "; optimizer.eps is 0, so a parameter whose gradient is 0 gets 0/0: use " +
              std::string(o.name == "adamw" ? "1e-8" : "1e-6");
  if (config.schedule.name == "step" && config.schedule.gamma > 1)
    advice += detail::concat("; schedule.gamma is ", config.schedule.gamma,
                             ", which multiplies the learning rate at every milestone: decays want gamma < 1");
  return advice;
}

class LossWatch {
 public:
  LossWatch(Device device, std::string advice) : device_(device), advice_(std::move(advice)) { reset(); }

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
                    "): the training loss is " + loss_text(v) + ": the run has diverged. " + advice_);
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
  std::string advice_;
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
    ballot_ = from_vector<double>({mine == SIGTERM ? 1.0 : 0.0, mine == SIGINT ? 1.0 : 0.0, mine == SIGUSR1 ? 1.0 : 0.0},
                                  {3}, cpu_);
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
    return votes[0] > 0 ? SIGTERM : votes[1] > 0 ? SIGINT : votes[2] > 0 ? SIGUSR1 : 0;
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
  if (differ.empty()) return;
  // Rank 0's configuration to every rank (every one takes this branch): a rank that differs names
  // its keys.
  Tensor length = from_vector<int64_t>({static_cast<int64_t>(text.size())}, {1}, cpu);
  group.broadcast(length, 0)->wait();
  const int64_t n = length.to_vector<int64_t>()[0];
  Tensor bytes = group.rank() == 0 ? from_vector<uint8_t>(std::vector<uint8_t>(text.begin(), text.end()), {n}, cpu)
                                   : empty({n}, kUInt8, cpu);
  group.broadcast(bytes, 0)->wait();
  const std::vector<uint8_t> rank0_bytes = bytes.to_vector<uint8_t>();
  const std::map<std::string, std::string> theirs = config_key_values(std::string(rank0_bytes.begin(), rank0_bytes.end())),
                                           ours = config_key_values(text);
  std::string keys;
  int count = 0;
  for (const auto& [key, value] : ours) {
    const auto it = theirs.find(key);
    if (it != theirs.end() && it->second == value) continue;
    if (++count <= 8)
      keys += detail::concat("\n  ", key, ": ", it == theirs.end() ? "(absent)" : it->second, " on rank 0, ", value,
                             " on rank ", group.rank());
  }
  DP_CHECK(false, "rank(s) ", differ, " resolved a different configuration from rank 0 (config file or --set "
           "overrides differ between ranks); every rank must run the same recipe", keys, count > 8 ? "\n  ..." : "");
}

// NOTE [ Distributed runs ]
// Every rank builds the same model from the same seed; rank 0's parameters and buffers are then
// broadcast (after a check that all ranks built the same structure). Each step a rank trains on
// its shard of the global batch; the Reducer (comm/ddp/reducer.h) averages the gradients,
// overlapping bucket all-reduces with backward, so the optimiser sees the same gradient on
// every rank and the replicas stay equal. The "comm" phase of the step profile is the exposed
// communication: the wait in Reducer::finish() after backward. Before evaluating, BatchNorm
// buffers are made equal (distributed.buffer_sync) and every rank evaluates its share of the test
// set (evaluate() in training_run.h adds the sums over the ranks); only rank 0 prints and writes
// files.
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

// The start of a run, said once: model, data, precision, tensor-core advice, distribution.
void announce(const Config& config, const TrainingRun& run, Console& console, MetricsLog* metrics) {
  std::ostringstream os;
  os << "model " << config.model.name << (config.model.name == "bert" ? " " + config.model.size : std::string()) << ": "
     << run.num_parameters << " parameters on " << run.device.str() << "; " << run.train_set().size() << " training / "
     << run.eval_set().size() << (run.plan.token_batching ? " evaluation sequences, " : " test samples, ")
     << run.plan.steps_per_epoch << " steps per epoch"
     << (run.input_format == MemoryFormat::ChannelsLast ? ", channels-last activations" : "");
  if (const TokenBatchSampler* batches = run.token_batches()) {
    const TokenBatchingOptions& o = batches->options();
    os << "\ntoken batching: " << (o.batching == TokenBatching::Fixed ? "fixed " + std::to_string(o.batch_size) +
                                                                            " rows per step"
                                                                      : "max " + std::to_string(o.max_tokens) +
                                                                            " padded tokens per rank batch")
       << ", balance " << config.data.balance << ", packing " << config.data.packing << ", sequences up to "
       << o.max_seq_length << " tokens, padded to a multiple of " << o.pad_to_multiple << "; the largest rank batch "
       << batches->largest_batch().num_rows() << " x " << batches->largest_batch().padded_length
       << ", pre-allocated by one forward and backward in " << std::fixed << std::setprecision(2)
       << run.preallocation_seconds << " s";
  }
  if (run.autocast != kFloat32)
    os << "\nmixed precision: " << config.run.precision << " autocast, float32 master weights, loss scaling "
       << (run.scaler->enabled() ? "on" : "off");
  if (config.run.cuda_graphs)
    os << "\ncuda graphs: each batch shape runs " << config.run.cuda_graph_warmup << " eager warm-up step(s), then is "
       << "captured once and replayed";
  if (run.device.is_cuda() && (run.autocast != kFloat32 || config.run.allow_tf32)) {
    // NOTE [ Tensor-core shapes ]: said once, the model left as built.
    const std::vector<nn::ShapeAdvice> advice = nn::tensor_core_shape_advice(*run.model);
    if (!advice.empty())
      os << "\ntensor cores: dimensions not a multiple of 8 take slower paths: " << nn::describe(advice);
    if (!run.plan.token_batching && run.plan.per_shard_batch % 8 != 0)
      os << "\ntensor cores: the batch per " << (run.fixed_shards ? "shard (" : "rank (") << run.plan.per_shard_batch
         << ") is not a multiple of 8";
  }
  if (run.world_size > 1)
    os << "\ndata-parallel over " << run.world_size << " ranks (" << run.group->backend_name() << "): "
       << (run.plan.token_batching ? "token batches (above)" : "batch " + std::to_string(run.plan.per_rank_batch) +
                                                                   " per rank")
       << ", " << run.reducer->buckets().size() << " gradient buckets"
       << (run.model_group != run.group ? std::string(" (") + run.model_group->backend_name() + ")" : "")
       << (config.distributed.grad_dtype == "bf16" ? ", sent as bf16" : "")
       << (config.distributed.sync_batchnorm ? "; BatchNorm statistics over the global batch (" +
                                                   std::to_string(run.synchronised_batchnorms) + " layers)"
                                             : std::string());
  if (run.world_size == 1 && config.distributed.grad_dtype == "bf16")
    os << "\nnote: distributed.grad_dtype bf16 compresses the gradients' all-reduce, and one process has none: "
          "they stay float32";
  if (run.fixed_shards)  // NOTE [ Fixed shards ]
    os << "\nfixed shards: the global batch as " << run.plan.shards << " shards of " << run.plan.per_shard_batch
       << ", " << run.plan.local_shards << " per rank trained one after another"
       << (config.distributed.sync_batchnorm ? "" : "; BatchNorm over each shard");
  // NOTE [ A schedule that does not fit its run ] (launch/config.cpp)
  for (const std::string& warning : run.schedule_warnings) os << "\nwarning: " << warning;
  console.line(os.str());
  if (metrics) {
    nlohmann::json rec = {{"event", "start"},
                          {"version", kDptrainVersion},
                          {"model", config.model.name},
                          {"parameters", run.num_parameters},
                          {"device", run.device.str()},
                          {"threads", config.run.threads},
                          {"steps_per_epoch", run.plan.steps_per_epoch},
                          {"world_size", run.world_size},
                          {"nodes", run.nodes},
                          {"precision", config.run.precision},
                          {"grad_dtype", config.distributed.grad_dtype},
                          {"unit", run.plan.token_batching ? "sequences" : "samples"}};
    // Fixed batches (what a scaling study compares: NOTE [ Scaling report ]); max_tokens batches vary.
    if (!run.plan.token_batching || config.data.batching == "fixed") {
      rec["global_batch"] = config.data.batch_size;
      rec["per_rank_batch"] = config.data.batch_size / run.world_size;
    } else {
      rec["max_tokens"] = config.data.max_tokens;
    }
    metrics->write(rec);
  }
}

// The share of `total_ms` of communication that backward hid, in percent: 100 × (1 − exposed /
// total), kept within [0, 100] (the two are measured apart); NaN when the total is unknown.
double hidden_percent(double exposed_ms, double total_ms) {
  if (std::isnan(total_ms)) return total_ms;
  if (total_ms <= 0) return 100.0;
  return std::clamp(100.0 * (1.0 - exposed_ms / total_ms), 0.0, 100.0);
}

// Communication figures of a distributed run: over the whole run and since the last report
// (host clock, the MPI backend's), and the epoch's spans timed on the device (NCCL: NOTE
// [ Communication timed on the device ] in comm/ddp/reducer.h; read a step or so late, and set
// beside the profiler's exposed comm phase, which also covers the epoch so far).
struct CommTally {
  double run_comm_ms = 0, run_exposed_ms = 0, window_comm_ms = 0, window_exposed_ms = 0;
  int64_t run_steps = 0, window_steps = 0;
  std::map<int, int64_t> last_bucket_counts;
  double epoch_device_comm_ms = 0;
  int64_t epoch_device_steps = 0;

  void add_device(const DeviceCommTime& t) {
    epoch_device_comm_ms += t.comm_ms;
    epoch_device_steps += t.steps;
  }
  void new_epoch() { epoch_device_comm_ms = 0, epoch_device_steps = 0; }
  // Milliseconds per step on the device's clock over the epoch so far; NaN before one was read.
  double epoch_device_comm_per_step() const {
    return epoch_device_steps > 0 ? epoch_device_comm_ms / static_cast<double>(epoch_device_steps)
                                  : std::numeric_limits<double>::quiet_NaN();
  }

  void add(const ReducerStepStats& s) {
    run_comm_ms += s.comm_ms;
    run_exposed_ms += s.exposed_ms;
    window_comm_ms += s.comm_ms;
    window_exposed_ms += s.exposed_ms;
    ++run_steps;
    ++window_steps;
    ++last_bucket_counts[s.last_bucket];
  }
  void new_window() {
    window_comm_ms = window_exposed_ms = 0;
    window_steps = 0;
  }
};

// Losses and samples since the last progress report; the losses are summed on the device.
struct ProgressWindow {
  Tensor loss;
  int64_t steps = 0, samples = 0;  // samples over all ranks
  Clock::time_point start;
  StepProfiler::Mark profiled;  // the profiler's totals when the window began

  void reset(Device device, const StepProfiler& profiler) {
    loss = zeros({}, kFloat32, device);
    steps = samples = 0;
    start = Clock::now();
    profiled = profiler.mark_now();
  }
};

// The progress line and the metrics log's step record (the window's loss is read here: the one
// host sync of a reporting step).
void report_progress(const Config& config, TrainingRun& run, Console& console, MetricsLog* metrics,
                     const StepProfiler& profiler, ProgressWindow& window, CommTally& comm, int64_t epoch,
                     int64_t step, int64_t step_in_epoch, bool last, int64_t& skipped_at_last_report) {
  StepStatus s;
  s.epoch = epoch;
  s.epochs = config.run.epochs;
  s.step = step_in_epoch;
  s.steps = run.plan.steps_per_epoch;
  // The mean over the ranks of each rank's mean loss: the global batch's loss, as one process
  // training on it would print (every rank reports at the same steps).
  s.loss = sum_over_ranks(run.group, {window.loss.item<double>() / static_cast<double>(window.steps)}, run.cpu)[0] /
           run.world_size;
  s.samples_per_second = static_cast<double>(window.samples) / seconds_since(window.start);
  if (run.plan.token_batching) s.sample_unit = "sequences";
  s.lr = run.clock->lr();  // this step's lr (a host read, with the loss's)
  const GradScaler& scaler = *run.scaler;
  const int64_t skipped_now = scaler.skipped_steps();
  const int64_t window_skipped = skipped_now - skipped_at_last_report;
  if (!scaler.enabled() && window_skipped > 0)  // under loss scaling skips are routine
    console.line(std::to_string(window_skipped) + " optimiser step(s) skipped up to step " + std::to_string(step) +
                 ": the gradient norm was not finite");
  console.step(s);
  if (metrics && (step_in_epoch % config.run.log_every == 0 || last)) {
    // The epoch's phases so far, and this window's (the steps since the last report: what the
    // window's samples_per_second was measured over, so a warm-up window can be left out).
    nlohmann::json phases, window_phases;
    for (int p = 0; p < static_cast<int>(Phase::kCount); ++p) {
      phases[phase_name(static_cast<Phase>(p))] = profiler.ms_per_step(static_cast<Phase>(p));
      window_phases[phase_name(static_cast<Phase>(p))] =
          profiler.ms_per_step_since(static_cast<Phase>(p), window.profiled);
    }
    nlohmann::json rec = {{"event", "step"},          {"epoch", epoch},
                          {"step", step},             {"loss", s.loss},
                          {"lr", s.lr},               {"samples_per_second", s.samples_per_second},
                          {"ms_per_step", phases},    {"window_ms_per_step", window_phases}};  // global
    // On a GPU "data" is the device's wait for the batch; the host's time is this (NOTE [ Step timing on a GPU ]).
    if (profiler.device_timed()) rec["data_host_ms"] = profiler.host_data_ms_per_step();
    if (scaler.enabled()) rec["loss_scale"] = {{"scale", scaler.get_scale()}, {"skipped_steps", window_skipped}};
    if (comm.window_steps > 0 && !run.device.is_cpu()) {  // NCCL: device time, the epoch so far
      const double exposed = profiler.ms_per_step(Phase::Comm), total = comm.epoch_device_comm_per_step();
      rec["comm"] = {{"exposed_ms", exposed}};
      if (comm.epoch_device_steps > 0 && !config.run.cuda_graphs)  // replays: comm is inside the graph phase
        rec["comm"].update({{"comm_ms", total}, {"hidden_pct", hidden_percent(exposed, total)}});
    } else if (comm.window_steps > 0)
      rec["comm"] = {{"comm_ms", comm.window_comm_ms / comm.window_steps},
                     {"exposed_ms", comm.window_exposed_ms / comm.window_steps},
                     {"hidden_pct", hidden_percent(comm.window_exposed_ms, comm.window_comm_ms)}};
    metrics->write(rec);
  }
  comm.new_window();
  window.reset(run.device, profiler);
  skipped_at_last_report = skipped_now;
}

// NOTE [ Divergence checks ]: a run of run.max_skipped_steps consecutive skipped steps.
void check_skipped_run(const Config& config, const GradScaler& scaler, int64_t step, int64_t epoch,
                       int64_t& next_skip_check) {
  if (step < next_skip_check) return;
  const int64_t in_a_row = scaler.skipped_in_a_row();
  if (in_a_row >= config.run.max_skipped_steps) {
    // Each skip backs the scale off after it was tried: the last one tried is one backoff above.
    const std::string last_tried = scale_text(scaler.get_scale() / config.loss_scale.backoff_factor);
    if (scaler.enabled() && in_a_row >= step)  // not one step of the run applied: the scale, not the model
      throw Error(detail::concat(
          "step ", step, " (epoch ", epoch, "): every optimiser step so far was skipped (non-finite gradients at ",
          "every loss scale from ", scale_text(config.loss_scale.init_scale), " down to ", last_tried, "), so no ",
          "update was ever applied: the initial loss scale is too high for this model rather than the run ",
          "diverged. Lower loss_scale.init_scale, or raise run.max_skipped_steps (", config.run.max_skipped_steps,
          ") to let it back off further"));
    const std::string why = scaler.enabled() ? "non-finite gradients at every loss scale down to " + last_tried
                                             : std::string("non-finite gradient norm");
    throw Error("step " + std::to_string(step) + " (epoch " + std::to_string(epoch) +
                "): the optimiser step was skipped " + std::to_string(in_a_row) + " times in a row (" + why +
                "): the run has diverged (run.max_skipped_steps is " + std::to_string(config.run.max_skipped_steps) +
                "). " + divergence_advice(config));
  }
  // The skipped run is read when it could first have reached the limit: caught at exactly that length.
  next_skip_check = step + (config.run.max_skipped_steps - in_a_row);
}

// An evaluation scheduled by samples (NOTE [ Evaluation schedule ]): its own line and record.
void report_evaluation(const Config& config, Console& console, MetricsLog* metrics, const Evaluation& eval,
                       int64_t step, int64_t epoch, int64_t samples, double seconds, bool reached_target) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(2);
  os << "evaluation after " << samples << " samples (step " << step << ", epoch " << epoch << "): test accuracy "
     << 100.0 * eval.accuracy << " %";
  os.precision(4);
  os << " (loss " << eval.loss << ")";
  os.precision(2);
  if (!std::isnan(eval.accuracy_top5)) os << ", top-5 " << 100.0 * eval.accuracy_top5 << " %";
  os.precision(1);
  os << ", " << seconds << " s";
  if (reached_target) {
    os.precision(2);
    os << "; target accuracy " << 100.0 * config.run.target_accuracy << " % reached: stopping";
  }
  console.line(os.str());
  if (metrics) {
    nlohmann::json rec = {{"event", "evaluation"},
                          {"step", step},
                          {"epoch", epoch},
                          {"samples", samples},
                          {"test_accuracy", eval.accuracy},
                          {"test_loss", eval.loss},
                          {"seconds", seconds},
                          {"reached_target", reached_target}};
    if (!std::isnan(eval.accuracy_top5)) rec["test_accuracy_top5"] = eval.accuracy_top5;
    metrics->write(rec);
  }
}

// The epoch's console line and metrics record.
void report_epoch(const Config& config, const TrainingRun& run, Console& console, MetricsLog* metrics,
                  StepProfiler& profiler, const EpochReport& e, bool reached_target) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(4);
  os << "epoch " << e.epoch << "/" << config.run.epochs << ": train loss ";
  if (!e.train_loss_known)
    os << "not known (resumed at the epoch's end from a checkpoint that did not keep it)";
  else
    os << e.train_loss;
  if (!std::isnan(e.test_accuracy)) {
    os.precision(2);
    os << ", test accuracy " << 100.0 * e.test_accuracy << " %";
    os.precision(4);
    os << " (loss " << e.test_loss << ")";
    os.precision(2);
    if (!std::isnan(e.test_accuracy_top5)) os << ", top-5 " << 100.0 * e.test_accuracy_top5 << " %";
  }
  os.precision(1);
  if (e.steps_run > 0)
    os << ", " << e.train_seconds << " s, " << e.samples_per_second
       << (run.plan.token_batching ? " sequences/s" : " samples/s");
  else
    os << ", no step left to run after the resume";
  console.line(os.str());
  profiler.flush();
  console.line("  step time: " + profiler.summary());
  // Text runs: the epoch's padding waste, rank imbalance and batch sizes (NOTE [ Token batching ]).
  std::optional<TokenEpochStats> tokens;
  if (const TokenBatchSampler* batches = run.token_batches()) {
    tokens = batches->epoch_stats(e.epoch - 1);
    console.line("  token batching: " + describe(*tokens));
  }
  // Image files skipped or damaged: every rank's shard counted (sum_over_ranks, on every rank).
  const FileReport train_files = file_report(run.train_set(), e.epoch - 1), test_files = file_report(run.eval_set(), 0);
  const FileReport train_total = add_file_reports_over_ranks(run, train_files),
                   test_total = add_file_reports_over_ranks(run, test_files);
  for (const std::string& line : describe_file_reports(train_files, test_files, train_total, test_total))
    console.line("  " + line);
  if (reached_target) {
    std::ostringstream t;
    t.setf(std::ios::fixed);
    t.precision(2);
    t << "target accuracy " << 100.0 * config.run.target_accuracy << " % reached after epoch " << e.epoch
      << ": stopping";
    console.line(t.str());
  }
  if (metrics) {
    nlohmann::json rec = {{"event", "epoch"},          {"epoch", e.epoch},
                          {"train_loss", e.train_loss_known ? nlohmann::json(e.train_loss) : nlohmann::json()},
                          {"seconds", e.train_seconds}, {"steps", e.steps_run},
                          {"samples_per_second",
                           e.steps_run > 0 ? nlohmann::json(e.samples_per_second) : nlohmann::json()},
                          {"peak_rss_mib", peak_rss_mib()}};
    if (!std::isnan(e.test_accuracy)) {
      rec["test_accuracy"] = e.test_accuracy;
      rec["test_loss"] = e.test_loss;
      if (!std::isnan(e.test_accuracy_top5)) rec["test_accuracy_top5"] = e.test_accuracy_top5;
    }
    if (train_total.skipped > 0 || test_total.skipped > 0)
      rec["skipped_files"] = {{"train", train_total.skipped}, {"test", test_total.skipped}};
    if (train_total.warned > 0 || test_total.warned > 0)
      rec["decode_warnings"] = {{"train", train_total.warned}, {"test", test_total.warned}};
    if (tokens) {
      nlohmann::json sizes = nlohmann::json::object(), lengths = nlohmann::json::object();
      for (const auto& [rows, count] : tokens->batch_sizes) sizes[std::to_string(rows)] = count;
      for (const auto& [length, count] : tokens->padded_lengths) lengths[std::to_string(length)] = count;
      rec["token_batching"] = {{"padding_waste", tokens->padding_waste},
                               {"mean_imbalance", tokens->mean_imbalance},
                               {"worst_imbalance", tokens->worst_imbalance},
                               {"sequences", tokens->sequences},
                               {"tokens", tokens->tokens},
                               {"padded_tokens", tokens->padded_tokens},
                               {"bottleneck_padded_tokens", tokens->bottleneck_padded_tokens},
                               {"batch_sizes", sizes},
                               {"padded_lengths", lengths}};
    }
    metrics->write(rec);
  }
}


// The end of a run: communication, loss scale and Shampoo summaries, and the metrics' end record.
void report_end(const Config& config, const TrainingRun& run, Console& console, MetricsLog* metrics,
                const StepProfiler& profiler, const CommTally& tally, TrainReport& report) {
  if (tally.run_steps > 0) {
    CommReport& c = report.comm;
    c.comm_ms = tally.run_comm_ms / tally.run_steps;
    c.exposed_ms = tally.run_exposed_ms / tally.run_steps;
    c.hidden_fraction = hidden_percent(tally.run_exposed_ms, tally.run_comm_ms) / 100.0;
    c.buckets = static_cast<int>(run.reducer->buckets().size());
    int64_t best = -1;
    for (const auto& [bucket, count] : tally.last_bucket_counts)
      if (count > best) best = count, c.most_often_last_bucket = bucket;
    char line[300];
    if (run.device.is_cpu()) {
      std::snprintf(line, sizeof line,
                    "communication: %.2f ms/step, %.2f ms exposed (%.1f %% hidden behind backward); "
                    "last bucket to finish: %d of %d (most often)",
                    c.comm_ms, c.exposed_ms, 100.0 * c.hidden_fraction, c.most_often_last_bucket, c.buckets);
    } else {
      // NCCL waits are stream-ordered: the host never sees a collective end, so the reducer's
      // host-clock figures mean nothing here. Both figures are device time over the last epoch:
      // the profiler's comm phase (exposed) and the reducer's spans (NOTE [ Communication timed
      // on the device ] in comm/ddp/reducer.h).
      c.exposed_ms = profiler.ms_per_step(Phase::Comm);
      c.comm_ms = tally.epoch_device_comm_per_step();
      c.hidden_fraction = hidden_percent(c.exposed_ms, c.comm_ms) / 100.0;
      c.most_often_last_bucket = c.buckets - 1;  // one stream runs them in order
      // With CUDA graphs the profiler's comm phase averages the few eager steps over every step,
      // and the spans cover the eager ones only: no common ground for a hidden share.
      if (config.run.cuda_graphs) c.comm_ms = c.hidden_fraction = std::numeric_limits<double>::quiet_NaN();
      if (tally.epoch_device_steps > 0 && !config.run.cuda_graphs) {
        std::snprintf(line, sizeof line,
                      "communication (NCCL): %.2f ms/step, %.2f ms exposed (%.1f %% hidden behind backward); "
                      "device time over the last epoch's %lld timed steps; %d buckets",
                      c.comm_ms, c.exposed_ms, 100.0 * c.hidden_fraction,
                      static_cast<long long>(tally.epoch_device_steps), c.buckets);
      } else {  // replayed steps' communication is inside their graph phase
        std::snprintf(line, sizeof line,
                      "communication (NCCL): %.2f ms/step exposed (device time, last epoch); %d buckets; %s",
                      c.exposed_ms, c.buckets,
                      config.run.cuda_graphs ? "replayed steps communicate inside their graph phase, so the total and "
                                               "the hidden share are not split out"
                                             : "no step was timed on the device, so the total and the hidden share "
                                               "are not known");
      }
    }
    console.line(line);
  }
  const GradScaler& scaler = *run.scaler;
  report.skipped_steps = scaler.skipped_steps();
  if (scaler.enabled())
    console.line("loss scale " + scale_text(scaler.get_scale()) + " at the end; " +
                 std::to_string(report.skipped_steps) + " of " + std::to_string(report.steps) +
                 " optimiser steps skipped for a gradient overflow");
  // Shampoo's cost is its roots: say how many, how many failed, and rank 0's share of the time.
  const auto* shampoo = dynamic_cast<const Shampoo*>(run.optimizer.get());
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
    const std::string digest = hex_digest(report.model_digest);
    const char* reason = report.stop_signal ? StopSignals::name(report.stop_signal)
                         : report.reached_target ? "target_reached"
                         : config.run.max_steps > 0 && report.steps >= config.run.max_steps ? "max_steps"
                                                                                             : "completed";
    nlohmann::json rec = {{"event", "end"}, {"reason", reason}, {"steps", report.steps},
                          {"peak_rss_mib", report.peak_rss_mib}, {"model_digest", digest}};
    if (scaler.enabled()) rec["loss_scale"] = {{"scale", scaler.get_scale()}, {"skipped_steps", report.skipped_steps}};
    if (shampoo)
      rec["shampoo"] = {{"root_computations", shampoo->root_computations()},
                        {"root_failures", shampoo->root_failures()},
                        {"local_blocks", shampoo->local_blocks()},
                        {"root_seconds", shampoo->root_seconds()},
                        {"root_comm_seconds", shampoo->root_comm_seconds()}};
    if (config.run.cuda_graphs)
      rec["cuda_graphs"] = {{"captures", report.graph_captures}, {"replays", report.graph_replays}};
    if (tally.run_steps > 0)
      rec["comm"] = {{"comm_ms", report.comm.comm_ms}, {"exposed_ms", report.comm.exposed_ms},
                     {"hidden_pct", 100.0 * report.comm.hidden_fraction},
                     {"most_often_last_bucket", report.comm.most_often_last_bucket}};
    metrics->write(rec);
  }
}

// run.weights_file (rank 0): the final weights with torch's names (model.init_from and torchvision
// load them); an earlier run's file is kept under another name, never overwritten.
void save_final_weights(const Config& config, TrainingRun& run, Console& console, TrainReport& report) {
  const nvtx::ScopedRange range("save weights");  // NOTE [ NVTX ranges ]
  const std::string path = (std::filesystem::path(config.run.output_dir) / config.run.weights_file).string();
  const std::string kept = keep_existing_file(path, "run.weights_file");
  if (!kept.empty()) console.line("an earlier run's " + path + " is kept as " + kept);
  const Clock::time_point start = Clock::now();
  save_tensors(path, run.model->state_dict(), model_file_metadata(config, run, report.steps, report.model_digest));
  report.weights_seconds = seconds_since(start);
  report.weights_path = path;
  report.weights_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
}

// NOTE [ Resuming a run ] (launch/run_checkpoint.h): rank 0 writes while the others wait for it
// in a barrier the watchdog times by distributed.checkpoint_timeout_s. One checkpoint per step
// at most.
class Checkpointer {
 public:
  Checkpointer(const Config& config, TrainingRun& run, Console& console, const MetricsLog* metrics)
      : config_(config), run_(run), console_(console), metrics_(metrics), dir_(checkpoints_dir(config)) {}

  // A fresh run (not resuming) moves an earlier run's checkpoints aside, so that its own never
  // collide with them and nothing earlier is lost.
  void keep_earlier_checkpoints() {
    if (run_.rank != 0 || list_checkpoints(dir_).empty()) return;
    for (int k = 1; k < 10000; ++k) {
      const std::string aside = dir_ + ".earlier." + std::to_string(k);
      if (std::filesystem::exists(aside)) continue;
      std::filesystem::rename(dir_, aside);
      const std::vector<std::string> kept = list_checkpoints(aside);
      console_.line("an earlier run's checkpoints " + dir_ + " are kept as " + aside +
                    (kept.empty() ? std::string()
                                  : " (to continue that run instead: --resume " + kept.back() + ")"));
      return;
    }
    throw Error("cannot keep the earlier checkpoints " + dir_ + ": 9999 kept copies exist already");
  }
  void resumed_at(int64_t step) { last_step_ = step; }
  // Temporaries of saves a killed process never finished (NOTE [ Checkpoint layout ]).
  void remove_unfinished_saves() {
    if (run_.rank != 0) return;
    for (const std::string& dir : dp::remove_unfinished_saves(dir_))
      console_.line("removed " + dir + ", a save that never completed");
  }
  // Writes one at `at` unless this step has one; returns its directory (rank 0) or "". Every rank
  // calls it at the same step.
  std::string save(const CheckpointPosition& at) {
    if (at.step == last_step_) return "";
    last_step_ = at.step;
    const NamedTensorList rank_buffers = gather_rank_buffers(run_, config_);  // every rank takes part
    std::string path;
    if (run_.rank == 0) path = write(at, rank_buffers);
    // The others wait here for rank 0's write, under the watchdog's checkpoint timeout
    // (distributed.checkpoint_timeout_s), not inside their next collective, where a save longer
    // than distributed.timeout_s would be taken for a stalled rank 0.
    if (run_.group && run_.world_size > 1) run_.group->barrier(kCheckpointWaitTag)->wait();
    return path;
  }

 private:
  std::string write(const CheckpointPosition& at, const NamedTensorList& rank_buffers) {
    const Clock::time_point start = Clock::now();
    Checkpoint checkpoint = capture_checkpoint(run_, config_, at, rank_buffers);
    if (metrics_) checkpoint.facts[kMetricsFact] = metrics_->text();  // the records so far
    const std::string path = save_checkpoint(dir_, checkpoint);
    const double seconds = seconds_since(start);
    uint64_t bytes = 0;
    for (const auto& f : std::filesystem::directory_iterator(path)) bytes += f.file_size();
    prune_checkpoints(dir_, config_.run.keep_checkpoints);
    char line[600];
    std::snprintf(line, sizeof line, "checkpoint %s (step %lld, %.1f MB, written in %.2f s)", path.c_str(),
                  static_cast<long long>(at.step), static_cast<double>(bytes) / 1e6, seconds);
    console_.line(line);
    return path;
  }

  const Config& config_;
  TrainingRun& run_;
  Console& console_;
  const MetricsLog* metrics_;
  std::string dir_;
  int64_t last_step_ = -1;
};

TrainReport run_training(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics,
                         const RunWorld& world, const StopSignals* stop_signals, MllogRun& mllog, int64_t& step) {
  const int world_size = world.group ? world.group->size() : 1;
  // MLPerf closed BERT fixes the evaluation interval by the global batch (checked on every rank:
  // only rank 0 logs). With max_tokens batching the batch is not fixed, and the user's choice stands.
  if (!config.logging.mllog.empty() && config.logging.benchmark == "bert" &&
      config.logging.submission_division == "closed" && config.data.batching == "fixed") {
    const int64_t interval = mlperf_bert_eval_interval(config.data.batch_size);
    DP_CHECK(config.run.eval_every_samples == interval, "run.eval_every_samples: closed-division MLPerf BERT ",
             "evaluates every floor(0.05 (230.23 B + 3,000,000) / 25,000) 25,000 samples, ", interval,
             " for data.batch_size ", config.data.batch_size, "; got ", config.run.eval_every_samples,
             " (set it, or logging.submission_division: open)");
  }
  // NOTE [ MLLOG call order ] (launch/mllog.h): the submission, then init until run_start.
  if (mllog.log.enabled()) {
    const bool on_cpu = runtime.device(world.device.empty() ? config.run.device : world.device).is_cpu();
    const std::string platform = config.logging.submission_platform.empty()
                                     ? std::to_string(world_size) + "x" + (on_cpu ? "cpu" : "gpu")
                                     : config.logging.submission_platform;
    const MlSubmission submission{config.logging.submission_org, platform, config.logging.submission_division,
                                  config.logging.submission_status, parse_mllog_benchmark(config.logging.benchmark)};
    for (const MlRecord& r : mllog_submission_records(submission)) mllog.log.event(r.key, r.value);
    mllog.log.event(mllog::kCacheClear, true);
    mllog.log.start(mllog::kInitStart);
  }

  std::unique_ptr<TrainingRun> built = build_run(config, runtime, world);  // NOTE [ Run builder ]
  TrainingRun& run = *built;
  // NOTE [ Resuming a run ]: where this run starts. The metrics file of a resumed run begins with
  // the records its checkpoint kept, then this run's start record and a resume record.
  Checkpointer checkpointer(config, run, console, metrics);
  checkpointer.remove_unfinished_saves();
  const std::string resume_from = checkpoint_to_resume(config);
  std::optional<Checkpoint> checkpoint;
  if (!resume_from.empty()) {
    try {
      checkpoint = load_checkpoint(resume_from, run.cpu);
    } catch (const Error& e) {
      // --resume auto took the newest; an older complete one may be what the user wants instead.
      const std::vector<std::string> all = list_checkpoints(checkpoints_dir(config));
      if (config.run.resume != "auto" || all.size() < 2) throw;
      throw Error(detail::concat(e.what(), "\n(run.resume auto takes the newest checkpoint; ", all.size() - 1,
                                 " older one", all.size() == 2 ? " is" : "s are", " there, the newest of them ",
                                 all[all.size() - 2], ": resume from it with --resume ", all[all.size() - 2],
                                 " after moving the damaged one aside)"));
    }
    const auto earlier = checkpoint->facts.find(kMetricsFact);
    if (metrics && earlier != checkpoint->facts.end()) metrics->write_lines(earlier->second);
  }
  announce(config, run, console, metrics);
  const int64_t steps_per_epoch = run.plan.steps_per_epoch;
  CheckpointPosition start;
  if (checkpoint) {
    start = restore_checkpoint(run, config, *checkpoint, "run.resume: '" + resume_from + "'");
    checkpoint.reset();  // its tensors are copied into the run
    checkpointer.resumed_at(start.step);
    if (metrics)
      metrics->write({{"event", "resume"}, {"checkpoint", resume_from}, {"step", start.step},
                      {"epoch", start.epoch + 1}, {"step_in_epoch", start.step_in_epoch}});
    console.line("resumed from " + resume_from + " after step " + std::to_string(start.step) + " (epoch " +
                 std::to_string(start.epoch + 1) + ", step " + std::to_string(start.step_in_epoch) + " of " +
                 std::to_string(steps_per_epoch) + ")");
    if (start.epoch >= config.run.epochs || (config.run.max_steps > 0 && start.step >= config.run.max_steps))
      console.line("nothing left to train: the checkpoint is past the run's end (run.epochs " +
                   std::to_string(config.run.epochs) +
                   (config.run.max_steps > 0 ? ", run.max_steps " + std::to_string(config.run.max_steps) : "") +
                   "); raise it to train on");
  } else {
    if (config.run.resume == "auto")
      console.line("run.resume auto: no checkpoint under " + checkpoints_dir(config) + "; starting afresh");
    checkpointer.keep_earlier_checkpoints();
  }
  // Every rank must start at the same step (a checkpoint directory every rank can read).
  if (run.group && run.world_size > 1) {
    const double total = sum_over_ranks(run.group, {static_cast<double>(start.step)}, run.cpu)[0];
    DP_CHECK(total == static_cast<double>(start.step) * run.world_size, "run.resume: the ranks found different ",
             "checkpoints (rank ", run.rank, " resumes after step ", start.step, "); put run.output_dir on a file ",
             "system every rank reads");
  }

  // On a terminal the progress line is redrawn often; in a log, every log_every steps.
  const int64_t report_every =
      console.terminal() ? std::max<int64_t>(1, std::min<int64_t>(config.run.log_every, 10)) : config.run.log_every;
  TrainReport report;
  StepProfiler profiler(&run.device.backend());  // NOTE [ Step timing on a GPU ]
  std::optional<GraphedSteps> graphed;  // NOTE [ CUDA graphs ]; destroyed before the run
  if (config.run.cuda_graphs) graphed.emplace(run, config.run.cuda_graph_warmup);
  CommTally comm;
  step = start.step;
  bool stop = config.run.max_steps > 0 && step >= config.run.max_steps;
  int stop_signal = 0;  // NOTE [ Stopping on a signal ]
  StopVote stop_vote(stop_signals, run.group, run.cpu);
  LossWatch loss_watch(run.device, divergence_advice(config));  // NOTE [ Divergence checks ]
  const int64_t check_every = std::min(report_every, kLossCheckEvery);
  int64_t next_skip_check = config.run.max_skipped_steps;
  int64_t skipped_at_last_report = 0;  // the window's skips are those since then
  const double target = config.run.target_accuracy;
  // NOTE [ Evaluation schedule ]
  // By epochs (run.eval_every, eval_offset): after the epochs the schedule names, and after the
  // last. By samples (run.eval_every_samples = N, MLPerf BERT): after the first step at which
  // the samples trained since the run began (all ranks; a resumed run goes on from the
  // checkpoint's count) reach the next multiple of N, and after the last epoch. MLLOG then counts
  // samples: evaluation records carry epoch_num = samples trained, and block_start/block_stop
  // (samples_count) enclose the training between evaluations instead of epoch_start/epoch_stop.
  const int64_t eval_interval = config.run.eval_every_samples;
  const bool by_samples = eval_interval > 0;
  int64_t samples_trained = start.samples;  // -1: unknown (an older checkpoint)
  DP_CHECK(!by_samples || samples_trained >= 0, "run.eval_every_samples: the checkpoint '", resume_from,
           "' does not record how many samples were trained (written by an older dptrain); evaluate by epochs ",
           "to resume it");
  int64_t next_eval_at = by_samples ? (samples_trained / eval_interval + 1) * eval_interval : 0;
  bool block_open = false;  // MLLOG, by samples
  int64_t evaluated_at_step = -1;
  Evaluation last_eval;
  bool quality_reached = false;  // by an evaluation, at the benchmark's quality target
  // Evaluates now (every rank), logs it to MLLOG, and stops the run when it reaches the target;
  // by samples, also reports it and sets the next one (by epochs, the epoch's report does).
  auto evaluate_now = [&](int64_t epoch) {
    const nvtx::ScopedRange range("evaluation");  // NOTE [ NVTX ranges ]
    const Clock::time_point eval_start = Clock::now();
    if (world_size > 1)
      sync_buffers(*run.model, *run.model_group,
                   config.distributed.buffer_sync == "average" ? BufferSync::Average : BufferSync::Broadcast);
    const int64_t counter = by_samples ? samples_trained : epoch;  // MLLOG's epoch_num
    if (block_open) mllog.log.end(mllog::kBlockStop, nullptr, {{"samples_count", samples_trained}});
    block_open = false;
    mllog.log.start(mllog::kEvalStart, nullptr, {{"epoch_num", counter}});
    last_eval = evaluate(run);
    // MLLOG's run_stop: success once any evaluation reached the quality target (a run without
    // run.target_accuracy trains on past it, and may end below it).
    quality_reached = quality_reached || last_eval.accuracy >= mllog_quality_target(config.logging.benchmark);
    mllog.log.event(mllog::kEvalAccuracy, last_eval.accuracy, {{"epoch_num", counter}});
    mllog.log.end(mllog::kEvalStop, nullptr, {{"epoch_num", counter}});
    evaluated_at_step = step;
    if (target > 0 && last_eval.accuracy >= target) {
      report.reached_target = true;
      stop = true;  // every rank saw the same reduced accuracy
    }
    if (by_samples) {
      next_eval_at = (samples_trained / eval_interval + 1) * eval_interval;
      report_evaluation(config, console, metrics, last_eval, step, epoch, samples_trained, seconds_since(eval_start),
                        report.reached_target);
    }
  };
  if (mllog.log.enabled()) {
    MlRunFacts facts;
    facts.steps_per_epoch = steps_per_epoch;
    facts.bn_span = config.distributed.sync_batchnorm ? config.data.batch_size : run.plan.per_shard_batch;
    facts.gradient_accumulation_steps = run.plan.local_shards;  // NOTE [ Fixed shards ]
    facts.train_samples = run.train_set().size();
    facts.eval_samples = run.eval_set().size();
    for (const MlRecord& r : mllog_hyperparameters(parse_mllog_benchmark(config.logging.benchmark), config, facts))
      mllog.log.event(r.key, r.value);
    mllog.log.end(mllog::kInitStop);
    mllog.log.start(mllog::kRunStart);  // the clock starts; no data has been read yet
  }
  for (int64_t epoch = start.epoch + 1; epoch <= config.run.epochs && !stop; ++epoch) {
    if (!by_samples) mllog.log.start(mllog::kEpochStart, nullptr, {{"epoch_num", epoch}});
    const int64_t first_step = epoch == start.epoch + 1 ? start.step_in_epoch : 0;  // resumed mid-epoch
    run.train_loader->begin_epoch(epoch - 1, first_step);
    profiler.reset();
    if (run.reducer) run.reducer->take_device_comm_time();  // the last epoch's stragglers: not this epoch's
    comm.new_epoch();
    const Clock::time_point epoch_start = Clock::now();
    ProgressWindow window;
    window.reset(run.device, profiler);
    // Summed on the device (no per-step sync); a resumed epoch starts from its checkpoint's sum,
    // the ranks' mean (NOTE [ Resuming a run ]), so its report covers the whole epoch.
    const bool loss_before_known = first_step == 0 || std::isfinite(start.epoch_loss_sum);
    Tensor epoch_loss = scalar_tensor(first_step > 0 && loss_before_known ? start.epoch_loss_sum : 0.0, kFloat64,
                                      run.device);
    int64_t epoch_samples = 0, step_in_epoch = first_step;
    // Where the run stands, as a checkpoint records it: every rank calls it (the loss so far is
    // averaged over the ranks), at the same step.
    auto position = [&] {
      const double loss_sum =
          loss_before_known ? sum_over_ranks(run.group, {epoch_loss.item<double>()}, run.cpu)[0] / world_size
                            : std::numeric_limits<double>::quiet_NaN();
      return CheckpointPosition{step, epoch - 1, step_in_epoch, samples_trained, loss_sum};
    };
    // Asked no further than its epoch's batches, the loader ends each epoch without a step that
    // finds no batch (it would show in Nsight as a step range holding only data).
    const int64_t epoch_batches = run.train_loader->num_batches();
    while (step_in_epoch < epoch_batches) {
      profiler.begin_step(step + 1);
      std::optional<LoadedBatch> batch = run.train_loader->next();
      if (!batch) {
        profiler.cancel_step();
        break;
      }
      if (by_samples && !block_open) {
        mllog.log.start(mllog::kBlockStart, nullptr, {{"samples_count", samples_trained}});
        block_open = true;
      }
      const int64_t batch_samples = batch->samples();  // images, or sequences
      // Over all ranks: the plan's count for batches of rows; fixed-shape batches are equal on
      // every rank.
      const int64_t step_samples = batch->step_samples() > 0 ? batch->step_samples() : batch_samples * world_size;
      // run.check_host_syncs: from the upload to the loss's running sums, nothing reads a device
      // value on the host (NOTE [ Host-sync checking ]); the reads between steps come after.
      std::string step_region;
      std::optional<ForbidHostSyncGuard> no_host_reads;
      if (config.run.check_host_syncs) {
        step_region = "training step " + std::to_string(step + 1) + " (run.check_host_syncs)";
        no_host_reads.emplace(step_region.c_str());
      }
      const Batch on_device = run.train_uploader->upload(*batch);
      const StepStats stats = graphed ? graphed->step(on_device, profiler) : train_step(run, on_device, profiler);
      run.train_uploader->release_host_buffers();
      batch.reset();  // hand the buffers back to the loader
      if (stats.comm) comm.add(*stats.comm);
      if (run.reducer) comm.add_device(run.reducer->take_device_comm_time());  // earlier steps', no wait
      {
        NoGradGuard no_grad;
        window.loss = add(window.loss, stats.loss.detach());
        epoch_loss = add(epoch_loss, stats.loss.detach().to(kFloat64));
      }
      no_host_reads.reset();
      ++step;
      ++step_in_epoch;
      loss_watch.add(stats.loss, step);
      ++window.steps;
      window.samples += step_samples;
      epoch_samples += batch_samples;
      if (samples_trained >= 0) samples_trained += step_samples;
      stop = config.run.max_steps > 0 && step >= config.run.max_steps;
      const bool report_now = step_in_epoch % report_every == 0 || step_in_epoch == steps_per_epoch || stop;
      if (report_now || step_in_epoch % check_every == 0) loss_watch.check(steps_per_epoch);
      check_skipped_run(config, *run.scaler, step, epoch, next_skip_check);
      if (report_now)
        report_progress(config, run, console, metrics, profiler, window, comm, epoch, step, step_in_epoch, stop,
                        skipped_at_last_report);
      if (by_samples && samples_trained >= next_eval_at) evaluate_now(epoch);
      if (config.run.checkpoint_every > 0 && step % config.run.checkpoint_every == 0) {
        const PhaseScope timed(profiler, Phase::Checkpoint);  // its cost shows in the step time
        checkpointer.save(position());
      }
      if ((stop_signal = stop_vote.after_step())) break;
      if (stop) break;
    }
    if (stop_signal) {
      // Preemption: the step boundary every rank agreed on is saved, then the run ends.
      const nvtx::ScopedRange range("checkpoint");
      checkpointer.save(position());
      console.line(std::string("stopped by ") + StopSignals::name(stop_signal) + " after step " + std::to_string(step) +
                   " (epoch " + std::to_string(epoch) + ", step " + std::to_string(step_in_epoch) + " of " +
                   std::to_string(steps_per_epoch) + "); no evaluation; continue with --resume auto");
      break;
    }

    if (!by_samples) mllog.log.end(mllog::kEpochStop, nullptr, {{"epoch_num", epoch}});
    EpochReport e;
    e.epoch = epoch;
    e.train_seconds = seconds_since(epoch_start);
    // Mean over ranks of each rank's mean loss (over the whole epoch where the checkpoint kept
    // its sum so far, else over the steps this process ran); samples counted over all ranks.
    e.steps_run = step_in_epoch - first_step;
    const int64_t loss_steps = loss_before_known ? step_in_epoch : e.steps_run;
    const std::vector<double> totals = sum_over_ranks(
        run.group, {epoch_loss.item<double>() / static_cast<double>(std::max<int64_t>(loss_steps, 1)),
                    static_cast<double>(epoch_samples)},
        run.cpu);
    e.train_loss_known = loss_steps > 0;
    e.train_loss = e.train_loss_known ? totals[0] / world_size : std::numeric_limits<double>::quiet_NaN();
    e.samples_per_second = e.steps_run > 0 ? totals[1] / e.train_seconds : std::numeric_limits<double>::quiet_NaN();
    // NOTE [ Evaluation schedule ]; always after the last epoch (once: not again right after
    // an evaluation by samples at this step).
    const bool scheduled = !by_samples && config.run.eval_every_epoch &&
                           (epoch + config.run.eval_offset) % config.run.eval_every == 0;
    if ((scheduled || epoch == config.run.epochs || stop) && evaluated_at_step != step) evaluate_now(epoch);
    e.test_loss = e.test_accuracy = e.test_accuracy_top5 = std::numeric_limits<double>::quiet_NaN();
    if (evaluated_at_step == step) {
      e.test_loss = last_eval.loss;
      e.test_accuracy = last_eval.accuracy;
      e.test_accuracy_top5 = last_eval.accuracy_top5;
    }
    report.epochs.push_back(e);
    report_epoch(config, run, console, metrics, profiler, e, report.reached_target && !by_samples);
    if (config.run.checkpoint_every_epochs > 0 && epoch % config.run.checkpoint_every_epochs == 0 &&
        epoch < config.run.epochs && !stop) {
      const nvtx::ScopedRange range("checkpoint");
      checkpointer.save({step, epoch, 0, samples_trained, 0.0});
    }
  }
  if (!stop_signal) stop_vote.finish();  // the vote cast after the last step
  if (block_open) mllog.log.end(mllog::kBlockStop, nullptr, {{"samples_count", samples_trained}});
  report.steps = step;
  report.samples = samples_trained;
  report.stop_signal = stop_signal;
  report.peak_rss_mib = peak_rss_mib();
  report.model_digest = model_digest(*run.model, run.cpu);
  if (!config.run.weights_file.empty() && run.rank == 0) save_final_weights(config, run, console, report);
  if (graphed) {
    report.graph_captures = graphed->captures();
    report.graph_replays = graphed->replays();
    console.line("cuda graphs: " + std::to_string(graphed->replays()) + " of " + std::to_string(report.steps - start.step) +
                 " steps replayed, " + std::to_string(graphed->captures()) + " capture(s) (" +
                 std::to_string(graphed->last_graph_nodes()) + " nodes in the last); the rest ran eagerly (" +
                 std::to_string(config.run.cuda_graph_warmup) + " warm-up steps per batch shape)");
  }
  if (run.reducer) comm.add_device(run.reducer->take_device_comm_time());  // the device has run every step
  report_end(config, run, console, metrics, profiler, comm, report);
  // MLPerf's success: the quality target reached (run.target_accuracy, else the benchmark's).
  mllog.stop(report.reached_target || (target == 0 && quality_reached));
  return report;
}

}  // namespace

TrainReport train(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics,
                  const RunWorld& world, const StopSignals* stop_signals) {
  int64_t step = 0;
  const bool rank0 = !world.group || world.group->rank() == 0;
  if (!config.run.weights_file.empty() && rank0) {
    // The weights are written after training: their folder is made (or found wrong) before it.
    const std::filesystem::path folder =
        (std::filesystem::path(config.run.output_dir) / config.run.weights_file).parent_path();
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    DP_CHECK(!ec, "run.weights_file: cannot create its folder '", folder.string(), "': ", ec.message());
    check_output_file_path((std::filesystem::path(config.run.output_dir) / config.run.weights_file).string(),
                           "run.weights_file");
  }
  if (rank0) {
    // Any run may write a checkpoint (a signal stops it with one): its folder must be one.
    const std::string checkpoints = checkpoints_dir(config);
    std::error_code ec;
    const std::filesystem::file_status st = std::filesystem::status(checkpoints, ec);
    DP_CHECK(!std::filesystem::exists(st) || std::filesystem::is_directory(st), "run.output_dir: '", checkpoints,
             "' is not a folder, and checkpoints go there: move it away, or choose another run.output_dir");
  }
  MllogRun mllog;
  if (!config.logging.mllog.empty() && rank0)
    mllog.log = MlLogger((std::filesystem::path(config.run.output_dir) / config.logging.mllog).string());
  try {
    return run_training(config, runtime, console, metrics, world, stop_signals, mllog, step);
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
