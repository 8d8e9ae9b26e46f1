#include "launch/trainer.h"

#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/step_profiler.h"
#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/sgd.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/data/fashion_mnist.h"
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

// Test-set loss and accuracy, with no autograd graph and the model in eval mode.
Evaluation evaluate(nn::Module& model, DataLoader& loader, Device device) {
  NoGradGuard no_grad;
  model.eval();
  loader.begin_epoch(0);
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  while (std::optional<LoadedBatch> batch = loader.next()) {
    Tensor images = batch->images.to(device), labels = batch->labels.to(device);
    Tensor logits = model.forward(images);
    loss_sum += cross_entropy(logits, labels, Reduction::Sum).item<double>();
    const std::vector<int64_t> predicted = argmax(logits, -1).to_vector<int64_t>();
    const std::vector<int64_t> truth = labels.to_vector<int64_t>();
    for (size_t i = 0; i < truth.size(); ++i) correct += predicted[i] == truth[i];
    count += batch->size();
  }
  model.train();
  return {loss_sum / static_cast<double>(count), static_cast<double>(correct) / static_cast<double>(count)};
}

std::unique_ptr<LrSchedule> make_schedule(const Config& config, int64_t steps_per_epoch) {
  const ScheduleConfig& s = config.schedule;
  LrScheduleOptions o;
  o.base_lr = config.optimizer.lr;
  o.total_steps = config.run.epochs * steps_per_epoch;
  o.warmup_steps = static_cast<int64_t>(std::llround(s.warmup_epochs * static_cast<double>(steps_per_epoch)));
  o.gamma = s.gamma;
  o.min_lr = s.min_lr;
  for (double e : s.step_epochs) o.milestones.push_back(static_cast<int64_t>(std::llround(e * steps_per_epoch)));
  return make_lr_schedule(s.name, o);
}

// A new run never overwrites what an earlier one wrote: an existing file is kept under a
// timestamped name.
std::string fresh_path(const std::filesystem::path& p) {
  if (std::filesystem::exists(p)) {
    const auto stamp = std::chrono::duration_cast<std::chrono::seconds>(
                           std::filesystem::last_write_time(p).time_since_epoch())
                           .count();
    const std::filesystem::path kept(p.string() + "." + std::to_string(stamp));
    std::filesystem::rename(p, kept);
  }
  return p.string();
}

std::unique_ptr<DataLoader> make_loader(const Dataset& dataset, const DataConfig& d, Device cpu, bool train,
                                        uint64_t seed) {
  std::unique_ptr<Sampler> sampler;
  if (train && d.shuffle) sampler = std::make_unique<RandomSampler>(dataset.size(), seed);
  else sampler = std::make_unique<SequentialSampler>(dataset.size());
  const int64_t batch = train ? d.batch_size : d.eval_batch_size;
  auto batches = std::make_unique<FixedSizeBatchSampler>(std::move(sampler), batch, train && d.drop_last);
  DataLoaderOptions options;
  options.num_threads = static_cast<int>(d.loader_threads);
  options.prefetch = static_cast<int>(d.prefetch) + 1;  // +1: the batch being trained on holds a slot
  return std::make_unique<DataLoader>(dataset, std::move(batches), cpu, options);
}

}  // namespace

TrainReport train(const Config& config, Runtime& runtime, Console& console, MetricsLog* metrics) {
  const Device device = runtime.device(config.run.device);
  const Device cpu = runtime.cpu();

  // ---- Data ----
  const Normalization norm{config.data.mean, config.data.std};
  FashionMnist train_set(config.data.root, Split::Train, norm);
  FashionMnist test_set(config.data.root, Split::Test, norm);
  std::unique_ptr<DataLoader> train_loader = make_loader(train_set, config.data, cpu, true, config.run.seed);
  std::unique_ptr<DataLoader> test_loader = make_loader(test_set, config.data, cpu, false, config.run.seed);

  // ---- Model, optimiser, schedule ----
  Generator init_gen(config.run.seed);
  ModelSpec spec;
  spec.name = config.model.name;
  spec.num_classes = config.model.num_classes;
  spec.in_channels = train_set.image_shape()[0];
  spec.image_size = train_set.image_shape()[1];
  spec.mlp_hidden = config.model.mlp_hidden;
  spec.dropout = config.model.dropout;
  std::shared_ptr<nn::Module> model = build_model(spec, device, init_gen);
  model->train();
  int64_t num_params = 0;
  for (const Tensor& p : model->parameters()) num_params += p.numel();

  SgdOptions sgd;
  sgd.lr = config.optimizer.lr;
  sgd.momentum = config.optimizer.momentum;
  sgd.dampening = config.optimizer.dampening;
  sgd.nesterov = config.optimizer.nesterov;
  sgd.weight_decay = config.optimizer.weight_decay;
  SGD optimizer(model->parameters(), sgd);
  train_loader->begin_epoch(0);
  const int64_t steps_per_epoch = train_loader->num_batches();
  std::unique_ptr<LrSchedule> schedule = make_schedule(config, steps_per_epoch);

  {
    std::ostringstream os;
    os << "model " << config.model.name << ": " << num_params << " parameters on " << device.str() << "; "
       << train_set.size() << " training / " << test_set.size() << " test samples, " << steps_per_epoch
       << " steps per epoch";
    console.line(os.str());
  }
  if (metrics)
    metrics->write({{"event", "start"}, {"model", config.model.name}, {"parameters", num_params},
                    {"device", device.str()}, {"threads", config.run.threads}, {"steps_per_epoch", steps_per_epoch}});

  // On a terminal the progress line is redrawn often; in a log, every log_every steps.
  const int64_t report_every =
      console.terminal() ? std::max<int64_t>(1, std::min<int64_t>(config.run.log_every, 10)) : config.run.log_every;

  TrainReport report;
  StepProfiler profiler;
  int64_t step = 0;
  bool stop = false;
  for (int64_t epoch = 1; epoch <= config.run.epochs && !stop; ++epoch) {
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
      Tensor images = batch->images.to(device), labels = batch->labels.to(device);
      const int64_t batch_size = batch->size();

      const double lr = schedule->lr_at(step);
      profiler.begin(Phase::Forward);
      Tensor logits = model->forward(images);
      Tensor loss = cross_entropy(logits, labels, Reduction::Mean, -100, config.loss.label_smoothing);
      profiler.begin(Phase::Backward);
      loss.backward();
      profiler.begin(Phase::Optimizer);
      optimizer.set_lr(lr);
      optimizer.step();
      optimizer.zero_grad(/*set_to_none=*/true);
      profiler.end();
      profiler.step_done();
      batch.reset();  // hand the buffers back to the loader

      {
        NoGradGuard no_grad;
        window_loss = add(window_loss, loss.detach());
        epoch_loss = add(epoch_loss, loss.detach().to(kFloat64));
      }
      ++step;
      ++step_in_epoch;
      ++window_steps;
      window_samples += batch_size;
      epoch_samples += batch_size;
      stop = config.run.max_steps > 0 && step >= config.run.max_steps;
      if (step_in_epoch % report_every == 0 || step_in_epoch == steps_per_epoch || stop) {
        StepStatus s;
        s.epoch = static_cast<int>(epoch);
        s.epochs = static_cast<int>(config.run.epochs);
        s.step = step_in_epoch;
        s.steps = steps_per_epoch;
        s.loss = window_loss.item<double>() / static_cast<double>(window_steps);
        s.samples_per_second = static_cast<double>(window_samples) / seconds_since(window_start);
        s.lr = lr;
        console.step(s);
        if (metrics && (step_in_epoch % config.run.log_every == 0 || stop)) {
          nlohmann::json phases;
          for (int p = 0; p < static_cast<int>(Phase::kCount); ++p)
            phases[phase_name(static_cast<Phase>(p))] =
                1e3 * profiler.seconds(static_cast<Phase>(p)) / static_cast<double>(profiler.steps());
          metrics->write({{"event", "step"}, {"epoch", epoch}, {"step", step}, {"loss", s.loss}, {"lr", lr},
                          {"samples_per_second", s.samples_per_second}, {"ms_per_step", phases}});
        }
        window_loss = zeros({}, kFloat32, device);
        window_steps = window_samples = 0;
        window_start = Clock::now();
      }
      if (stop) break;
    }

    EpochReport e;
    e.epoch = epoch;
    e.train_seconds = seconds_since(epoch_start);
    e.train_loss = epoch_loss.item<double>() / static_cast<double>(std::max<int64_t>(step_in_epoch, 1));
    e.samples_per_second = static_cast<double>(epoch_samples) / e.train_seconds;
    Evaluation eval;
    if (config.run.eval_every_epoch || epoch == config.run.epochs || stop) eval = evaluate(*model, *test_loader, device);
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
    console.line("  step time: " + profiler.summary());
    if (metrics) {
      nlohmann::json rec = {{"event", "epoch"},          {"epoch", epoch},
                            {"train_loss", e.train_loss}, {"seconds", e.train_seconds},
                            {"samples_per_second", e.samples_per_second}, {"peak_rss_mib", peak_rss_mib()}};
      if (!std::isnan(e.test_accuracy)) {
        rec["test_accuracy"] = e.test_accuracy;
        rec["test_loss"] = e.test_loss;
      }
      metrics->write(rec);
    }
  }
  report.steps = step;
  report.peak_rss_mib = peak_rss_mib();
  if (metrics) metrics->write({{"event", "end"}, {"steps", step}, {"peak_rss_mib", report.peak_rss_mib}});
  return report;
}

std::string prepare_metrics_path(const Config& config) {
  return fresh_path(std::filesystem::path(config.run.output_dir) / config.run.metrics_file);
}

}  // namespace dp
