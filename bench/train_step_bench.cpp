// dptrain side of the training-step benchmark (pairs with torch_reference.py on the CPU and
// gpu/torch_gpu_step.py on a GPU): one step = forward, cross-entropy, backward, SGD (momentum
// 0.9), zero_grad(set_to_none). Fixed random inputs; warmup, then median/min over --iters. JSON
// lines on stdout.
//   train_step_bench [--threads 2] [--iters 20] [--warmup 5] [--only PREFIX] [--precision bf16]
//                    [--memory-format channels_last]
//   train_step_bench --memory-steps 1000 [--only small_cnn_b128]   (peak RSS over a long run)
//   train_step_bench --device cuda [--tf32] [--block 10]          (GPU: see below)
//   train_step_bench --device cuda --profile-steps 1 ...          (under ncu --profile-from-start off)
//   train_step_bench --device cuda --cuda-graphs ...              (each step replayed as one CUDA graph)
//
// On a GPU a step only queues kernels, so a sample is a block of --block steps queued back to
// back between two synchronize() calls, timed with the host clock and divided by --block (the
// one synchronisation per block costs microseconds against milliseconds of steps); the median
// and min are over --iters such blocks, after --warmup untimed steps (cuDNN's algorithm search
// and the memory pool's first allocations happen there). --tf32 lets float32 GEMMs and
// convolutions use TF32 tensor cores (CudaOptions::allow_tf32), as PyTorch's allow_tf32 flags.
// --precision bf16|fp16 runs forward and loss under autocast (float32 master weights, as
// run.precision; no loss scaling: the step time is the point) and suffixes the case names
// ("small_cnn_b128_bf16"). --memory-format channels_last gives the model a channels-last input, as
// run.channels_last does (NOTE [ Channels-last ]), and suffixes "_cl". Cases marked gpu_only (too slow on a CPU to be useful) run only with --device cuda,
// and those marked on_request (ResNet-50 at batch 128) only when --only names them.
// --cuda-graphs captures one step after the warm-up (Backend::begin_capture, NOTE [ CUDA graphs ]
// in launch/graphed_step.h) and times its replays instead; the case names get "_graph".
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "models/registry.h"
#include "optim/sgd.h"
#include "runtime/autograd/autocast.h"
#include "runtime/core/runtime.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif
#include "runtime/ops/creation.h"
#include "runtime/ops/loss.h"

namespace {

struct Case {
  const char* name;
  const char* model;
  dp::Shape input;
  bool gpu_only = false;
  int64_t num_classes = 10;
  bool on_request = false;  // runs only when --only names it (a long case: its own GPU-proof step)
};

const Case kCases[] = {
    {"small_cnn_b128", "small_cnn", {128, 1, 28, 28}},
    {"mlp_b256", "mlp", {256, 1, 28, 28}},
    {"resnet18_b32", "resnet18", {32, 3, 32, 32}},
    {"resnet18_b256", "resnet18", {256, 3, 32, 32}, /*gpu_only=*/true},
    // torchvision's resnet50() as an ImageNet recipe trains it (1000 classes, 224x224); a small
    // per-core batch, so that a CPU step takes seconds, not minutes.
    {"resnet50_224_b8", "resnet50", {8, 3, 224, 224}, /*gpu_only=*/false, /*num_classes=*/1000},
    // ResNet-50 at the MLPerf recipe's per-GPU batch (issues 9 and 11 compare it with PyTorch on a GPU).
    {"resnet50_224_b128", "resnet50", {128, 3, 224, 224}, /*gpu_only=*/true, /*num_classes=*/1000,
     /*on_request=*/true},
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
  int memory_steps = 0, block = 10, profile_steps = 0;
  std::string device_spec = "cpu";
  bool tf32 = false;
  std::string precision = "fp32", memory_format = "nchw";
  dp::bench::add_common_options(app, opt);
  app.add_option("--memory-format", memory_format, "the input's (and so the activations') memory format")
      ->check(CLI::IsMember({"nchw", "channels_last"}));
  app.add_option("--precision", precision, "fp32, or bf16/fp16 autocast")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--memory-steps", memory_steps, "run this many steps and report peak RSS instead of timing");
  app.add_option("--device", device_spec, "cpu, cuda or cuda:N");
  app.add_option("--block", block, "GPU: steps per timed sample (queued back to back)")->check(CLI::PositiveNumber);
  app.add_flag("--tf32", tf32, "GPU: float32 GEMM and convolution on TF32 tensor cores");
  app.add_option("--profile-steps", profile_steps,
                 "GPU: after --warmup steps, run this many between cudaProfilerStart/Stop (for ncu "
                 "--profile-from-start off) instead of timing")
      ->check(CLI::PositiveNumber);
  bool cuda_graphs = false;
  app.add_flag("--cuda-graphs", cuda_graphs, "GPU: capture one step after the warm-up, time its replays");
  CLI11_PARSE(app, argc, argv);
  const int threads = opt.threads, iters = opt.iters, warmup = opt.warmup;
  dp::RuntimeOptions runtime_options = dp::bench::runtime_options(threads);
  runtime_options.allow_tf32 = tf32;
  runtime_options.cudnn_benchmark = true;
  dp::Runtime runtime(runtime_options);
  const std::optional<dp::Device> opened = dp::bench::open_device(runtime, device_spec, "train_step_bench");
  if (!opened) return 2;
  const dp::Device device = *opened;
  if (cuda_graphs && (!device.is_cuda() || profile_steps > 0 || memory_steps > 0)) {
    std::fprintf(stderr, "train_step_bench: --cuda-graphs times graph replays: it needs --device cuda, without "
                         "--profile-steps or --memory-steps\n");
    return 2;
  }
  if (profile_steps > 0 && !device.is_cuda()) {
    std::fprintf(stderr, "train_step_bench: --profile-steps brackets steps for a CUDA profiler; it needs --device cuda\n");
    return 2;
  }
#ifdef DPTRAIN_HAVE_CUDA
  // The runtime's option already reaches the backend; set it on the backend too, so that the
  // number printed below is the one in force.
  if (device.is_cuda()) static_cast<dp::cuda::CudaBackend&>(device.backend()).set_allow_tf32(tf32);
#endif
  const dp::DType autocast = precision == "bf16" ? dp::kBFloat16 : precision == "fp16" ? dp::kFloat16 : dp::kFloat32;
  for (const Case& case_ : kCases) {
    if (!opt.selected(case_.name) || (case_.on_request && opt.only.empty())) continue;
    const bool channels_last = memory_format == "channels_last";
    const std::string case_name = std::string(case_.name) + (precision == "fp32" ? "" : "_" + precision) +
                                  (channels_last ? "_cl" : "") + (cuda_graphs ? "_graph" : "");
    Case c = case_;
    c.name = case_name.c_str();
    if (c.gpu_only && !device.is_cuda()) continue;
    dp::Generator gen(0);
    dp::ModelSpec spec;
    spec.name = c.model;
    spec.num_classes = c.num_classes;
    spec.in_channels = c.input[1];
    spec.image_size = c.input[2];
    auto model = dp::build_model(spec, device, gen);
    model->train();
    dp::SgdOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    dp::SGD sgd(model->parameters(), o);
    dp::Tensor x = dp::randn(c.input, gen, dp::kFloat32, device);
    if (channels_last) x = x.contiguous(dp::MemoryFormat::ChannelsLast);
    std::vector<int64_t> labels(c.input[0]);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
    dp::Tensor y = dp::from_vector<int64_t>(labels, {c.input[0]}, device);
    auto step = [&] {
      dp::Tensor loss;
      {
        dp::AutocastGuard autocast_scope(autocast);
        loss = dp::cross_entropy(model->forward(x), y);
      }
      loss.backward();
      sgd.step();
      sgd.zero_grad(true);
    };
#ifdef DPTRAIN_HAVE_CUDA
    if (device.is_cuda() && profile_steps > 0) {
      auto& cuda = static_cast<dp::cuda::CudaBackend&>(device.backend());
      for (int i = 0; i < warmup; ++i) step();
      cuda.synchronize();
      cuda.profiler_start();
      for (int i = 0; i < profile_steps; ++i) step();
      cuda.synchronize();
      cuda.profiler_stop();
      std::printf("{\"name\": \"%s\", \"device\": \"%s\", \"profiled_steps\": %d, \"warmup\": %d}\n", c.name,
                  device.str().c_str(), profile_steps, warmup);
      std::fflush(stdout);
      continue;
    }
#endif
    if (device.is_cuda() && memory_steps == 0) {
      std::unique_ptr<dp::DeviceGraph> graph;
      if (cuda_graphs) {
        for (int i = 0; i < warmup; ++i) step();  // cuDNN's search and the optimiser's state, outside the graph
        graph = dp::capture_graph(device.backend(), step);
      }
      auto timed_step = [&] { graph ? graph->replay() : step(); };
      dp::bench::Timing t =
          dp::bench::time_blocks(timed_step, [&] { device.backend().synchronize(); }, warmup, iters, block);
      std::printf("{\"name\": \"%s\", \"device\": \"%s\", \"tf32\": %s, \"median_ms\": %.4f, "
                  "\"min_ms\": %.4f, \"iters\": %d, \"block\": %d, \"warmup\": %d, \"graph_nodes\": %zu}\n",
                  c.name, device.str().c_str(), tf32 ? "true" : "false", t.median_ms, t.min_ms, t.iters, block,
                  warmup, graph ? graph->node_count() : size_t(0));
    } else if (memory_steps > 0) {
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
