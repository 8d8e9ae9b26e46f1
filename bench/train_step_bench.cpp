// dptrain side of the training-step benchmark (pairs with torch_reference.py): one step =
// forward, cross-entropy, backward, SGD (momentum 0.9), zero_grad(set_to_none). Fixed random
// inputs; warmup, then median/min over --iters. JSON lines on stdout.
//   train_step_bench [--threads 2] [--iters 20] [--warmup 5] [--only PREFIX]
//   train_step_bench --memory-steps 1000 [--only small_cnn_b128]   (peak RSS over a long run)
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace {

struct Case {
  const char* name;
  const char* model;
  dp::Shape input;
};

const Case kCases[] = {
    {"small_cnn_b128", "small_cnn", {128, 1, 28, 28}},
    {"mlp_b256", "mlp", {256, 1, 28, 28}},
    {"resnet18_b32", "resnet18", {32, 3, 32, 32}},
};

double rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Training-step time of dptrain's models (JSON lines)", "train_step_bench"};
  dp::bench::CommonOptions opt;
  int memory_steps = 0;
  dp::bench::add_common_options(app, opt);
  app.add_option("--memory-steps", memory_steps, "run this many steps and report peak RSS instead of timing");
  CLI11_PARSE(app, argc, argv);
  const int threads = opt.threads, iters = opt.iters, warmup = opt.warmup;
  dp::Runtime runtime(dp::RuntimeOptions{threads});
  dp::Device cpu = runtime.cpu();
  for (const Case& c : kCases) {
    if (!opt.selected(c.name)) continue;
    dp::Generator gen(0);
    dp::ModelSpec spec;
    spec.name = c.model;
    spec.num_classes = 10;
    spec.in_channels = c.input[1];
    auto model = dp::build_model(spec, cpu, gen);
    model->train();
    dp::SgdOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    dp::SGD sgd(model->parameters(), o);
    dp::Tensor x = dp::randn(c.input, gen, dp::kFloat32, cpu);
    std::vector<int64_t> labels(c.input[0]);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
    dp::Tensor y = dp::from_vector<int64_t>(labels, {c.input[0]}, cpu);
    auto step = [&] {
      dp::Tensor loss = dp::cross_entropy(model->forward(x), y);
      loss.backward();
      sgd.step();
      sgd.zero_grad(true);
    };
    if (memory_steps > 0) {
      for (int i = 0; i < 100; ++i) step();
      const double after_100 = rss_mib();
      for (int i = 100; i < memory_steps; ++i) step();
      std::printf("{\"name\": \"%s\", \"threads\": %d, \"steps\": %d, \"peak_rss_mib_after_100\": %.1f, "
                  "\"peak_rss_mib_after_all\": %.1f}\n",
                  c.name, threads, memory_steps, after_100, rss_mib());
    } else {
      dp::bench::Timing t = dp::bench::time_it(step, warmup, iters);
      std::printf("{\"name\": \"%s\", \"threads\": %d, \"median_ms\": %.3f, \"min_ms\": %.3f, \"iters\": %d}\n",
                  c.name, threads, t.median_ms, t.min_ms, t.iters);
    }
    std::fflush(stdout);
  }
  return 0;
}
