// dptrain: train a model from a YAML recipe, on one process or data-parallel over many.
//   dptrain --config configs/fashion_mnist.yaml [--set section.key=value ...] [--print-config]
//   mpirun -np 4 dptrain --config ...      srun -n 4 dptrain --config ...   (Slurm with PMIx)
//   dptrain check-mllog FILE --benchmark resnet|bert     (MLPerf log compliance, docs/mllog.md)
//   dptrain prepare-text [FILE ...] --out DIR [--vocab vocab.txt]   (BERT's token shards)
//   dptrain scaling-report RUN... [--baseline RUN] [--format table|markdown|csv|json]   (docs/scaling.md)
//   dptrain evaluate --config ... --weights FILE | --checkpoint DIR|auto [--json]   (evaluation only)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_process_group.h"
#ifdef DPTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_process_group.h"
#endif
#include "comm/world.h"
#include "launch/cli.h"
#include "launch/config.h"
#include "launch/console.h"
#include "launch/evaluate_command.h"
#include "launch/metrics_log.h"
#include "launch/mllog_checker.h"
#include "launch/stop_signals.h"
#include "launch/trainer.h"
#include "launch/version.h"
#include "runtime/core/error.h"
#include "runtime/core/host_memory.h"
#include "runtime/core/runtime.h"

namespace {

// Whether the launcher started several processes, checked before MPI_Init: Open MPI aborts
// inside MPI_Init when srun starts it without PMIx, before we could say why.
bool launched_as_many_ranks(const dp::LauncherEnv& launcher, const dp::EnvMap& env) {
  if (launcher.launcher == "slurm" && launcher.size.value_or(1) > 1) {
    DP_CHECK(env.count("PMIX_RANK") || env.count("OMPI_COMM_WORLD_RANK"),
             "started by srun as rank ", launcher.rank.value_or(0), " of ", launcher.size.value_or(1),
             " without PMIx (", launcher.size_var, " is set but PMIX_RANK is not), so MPI cannot connect the "
             "ranks: launch with `srun --mpi=pmix ...` (or set MpiDefault=pmix in slurm.conf)");
  }
  if (launcher.launcher == "pmix") return true;  // PMIx gives no size in the environment
  return launcher.size.value_or(1) > 1 || launcher.launcher == "openmpi";
}

// Redraw the progress line in place only on a terminal that is really the user's: under mpirun
// a rank's stdout can be a pseudo-terminal even when mpirun's own output goes to a file, where
// the redraw codes would be garbage; TERM=dumb (Emacs shells, some CI) asks for plain lines.
bool redraw_progress(const dp::LauncherEnv& launcher, const dp::EnvMap& env) {
  if (!dp::Console::is_terminal(stdout)) return false;
  if (launcher.launcher == "openmpi" || launcher.launcher == "pmix") return false;
  const auto term = env.find("TERM");
  return term == env.end() || term->second != "dumb";
}

}  // namespace

int main(int argc, char** argv) {
  std::variant<dp::CliArgs, int> parsed = dp::parse_cli(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const dp::CliArgs& args = std::get<dp::CliArgs>(parsed);
  // A file check: no config, no MPI.
  if (const auto& check = args.check_mllog)
    return dp::run_check_mllog(check->path, dp::parse_mllog_benchmark(check->benchmark), stdout, stderr);
  if (const auto& prepare = args.prepare_text) return dp::run_prepare_text(*prepare, stdout, stderr);
  if (const auto& report = args.scaling_report) return dp::run_scaling_report(*report, stdout, stderr);
  int rank = 0, world_size = 1;
  // First, before MPI and every computing thread, which inherit its blocked signals (NOTE
  // [ Signals on one thread ]); destroyed last.
  // `evaluate` writes nothing, so a signal may end it at once (the default dispositions).
  std::optional<dp::StopSignals> stop_signals;  // NOTE [ Stopping on a signal ]
  try {
    if (!args.evaluate) stop_signals.emplace();
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "dptrain: error: %s\n", e.what());
    return 1;
  }
  // Outside the try: on an error the catch must run before the group's destructor, which would
  // wait for collectives the other ranks may never join.
  std::unique_ptr<dp::MpiEnvironment> mpi;
  std::unique_ptr<dp::ProcessGroup> gpu_group;  // NCCL, for the gradients of a GPU run
  std::unique_ptr<dp::MpiProcessGroup> group;
  std::unique_ptr<dp::ProcessGroup> batch_norm_group;  // distributed.sync_batchnorm
  try {
    const dp::Config config = dp::load_config(args.config_path, args.overrides);
    if (args.print_config) {
      std::fputs(dp::to_yaml(config).c_str(), stdout);
      return 0;
    }
    const dp::EnvMap env = dp::process_environment();
    const dp::LauncherEnv launcher = dp::parse_launcher_env(env);
    dp::World world;
    if (launched_as_many_ranks(launcher, env)) {
      mpi = std::make_unique<dp::MpiEnvironment>(&argc, &argv);
      world = dp::discover_world(*mpi, env);
      rank = world.rank;
      world_size = world.size;
    }
    // The configs stay identical across ranks (their hash is compared); the device is per rank.
    const std::string device = dp::device_for_rank(config.run.device, world);
    dp::RuntimeOptions runtime_options;
    runtime_options.cpu_threads = static_cast<int>(config.run.threads);
    runtime_options.allow_tf32 = config.run.allow_tf32;
    runtime_options.cudnn_benchmark = config.run.cudnn_benchmark;
    // NOTE [ CPU memory limit ] (runtime/backend/cpu/cpu_backend.h)
    if (config.run.cpu_memory_limit_gib > 0) {
      runtime_options.cpu_memory_limit_bytes =
          std::max<size_t>(1, static_cast<size_t>(config.run.cpu_memory_limit_gib * 1073741824.0));
      runtime_options.cpu_memory_limit_source = "run.cpu_memory_limit_gib";
    } else {
      const dp::HostMemory memory = dp::host_memory();
      runtime_options.cpu_memory_limit_bytes = dp::automatic_cpu_memory_limit(memory, world.local_size);
      runtime_options.cpu_memory_limit_source =
          "run.cpu_memory_limit_gib 0: " + dp::automatic_cpu_memory_limit_source(memory, world.local_size);
    }
    dp::Runtime runtime(runtime_options);
    const auto timeout = std::chrono::milliseconds(std::llround(config.distributed.timeout_s * 1000.0));
    if (world_size > 1 && runtime.device(device).is_cuda()) {
      // Before the MPI group: NCCL's id is broadcast on this thread, which MPI_THREAD_SERIALIZED
      // allows only while no MPI group's communication thread runs.
#ifdef DPTRAIN_HAVE_NCCL
      dp::NcclProcessGroupOptions nccl_options;
      nccl_options.timeout = timeout;
      // Two communicators on the GPU: NOTE [ Several communicators on one GPU ].
      nccl_options.shares_gpu_with_other_groups = config.distributed.sync_batchnorm;
      gpu_group = std::make_unique<dp::NcclProcessGroup>(*mpi, runtime.device(device), nccl_options);
      if (config.distributed.sync_batchnorm)
        batch_norm_group = std::make_unique<dp::NcclProcessGroup>(*mpi, runtime.device(device), nccl_options);
#else
      throw dp::Error("data-parallel training on " + device +
                      " needs the NCCL process group, and this build has none (NCCL was not found at configure "
                      "time: install it with the CUDA toolkit or set NCCL_ROOT, then rebuild)");
#endif
    }
    if (world_size > 1) {
      dp::MpiProcessGroupOptions options;
      options.watchdog_timeout = timeout;
      options.checkpoint_wait_timeout =
          std::chrono::milliseconds(std::llround(config.distributed.checkpoint_timeout_s * 1000.0));
      options.rank_ordered_sums = config.run.deterministic;
      options.check_agreement = config.distributed.check_agreement;
      group = std::make_unique<dp::MpiProcessGroup>(*mpi, options);
      dp::check_same_config_on_every_rank(config, *group, runtime.cpu());
      // NOTE [ Dedicated group for batch statistics ] (comm/ddp/sync_batch_norm.h)
      if (config.distributed.sync_batchnorm && !batch_norm_group)
        batch_norm_group = std::make_unique<dp::MpiProcessGroup>(*mpi, options);
    }
    // Only rank 0 prints and writes files.
    dp::Console console(rank == 0 ? stdout : nullptr, rank == 0 && redraw_progress(launcher, env));
    const dp::RunWorld run_world{group.get(), gpu_group.get(), device, batch_norm_group.get(), world.nodes};
    if (const auto& evaluate = args.evaluate) {  // NOTE [ Evaluating weights ]: nothing written
      if (!evaluate->json)
        console.line(std::string("dptrain ") + dp::kDptrainVersion + " evaluate — " + args.config_path + " on " +
                     device + (world_size > 1 ? ", " + std::to_string(world_size) + " ranks" : ""));
      dp::run_evaluate(config, runtime, console, rank == 0 ? stdout : nullptr, run_world, *evaluate);
      // The result is the command's product: a full disk or a closed pipe must not pass for success.
      DP_CHECK(rank != 0 || (std::fflush(stdout) == 0 && !std::ferror(stdout)),
               "evaluate: writing the result to standard output failed: ", std::strerror(errno));
      batch_norm_group.reset();
      group.reset();
      gpu_group.reset();
      return 0;
    }
    console.line(std::string("dptrain ") + dp::kDptrainVersion + " — resolved configuration (" + args.config_path + "):");
    console.line(dp::to_yaml(config));
    std::unique_ptr<dp::MetricsLog> metrics;
    if (rank == 0) {
      metrics = std::make_unique<dp::MetricsLog>(dp::metrics_path(config));
      if (!metrics->kept_previous().empty())
        console.line("an earlier run's " + metrics->path() + " is kept as " + metrics->kept_previous());
    }
    dp::TrainReport report =
        dp::train(config, runtime, console, metrics.get(), run_world, &*stop_signals);
    char line[400];
    std::snprintf(line, sizeof line, "%s: %lld steps, peak RSS %.0f MiB%s, model digest %016llx, metrics in %s",
                  report.stop_signal ? dp::StopSignals::name(report.stop_signal) : "done",
                  static_cast<long long>(report.steps), report.peak_rss_mib, world_size > 1 ? " (rank 0)" : "",
                  static_cast<unsigned long long>(report.model_digest), metrics ? metrics->path().c_str() : "-");
    console.line(line);
    if (!report.weights_path.empty()) {
      std::snprintf(line, sizeof line, "weights in %s (%.1f MB, written in %.2f s)", report.weights_path.c_str(),
                    static_cast<double>(report.weights_bytes) / 1e6, report.weights_seconds);
      console.line(line);
    }
    batch_norm_group.reset();
    group.reset();
    gpu_group.reset();
    // A run a signal stopped exits as a process that signal killed would (128 + N), so that
    // scripts and Slurm see it was not a completed run.
    return report.stop_signal ? 128 + report.stop_signal : 0;
  } catch (const std::exception& e) {
    // dp::Error, or the file system refusing a path the user gave (too long, no permission): both
    // are the user's to act on, with the path in the message; anything else is a bug of ours.
    const bool ours = dynamic_cast<const dp::Error*>(&e) != nullptr ||
                      dynamic_cast<const std::filesystem::filesystem_error*>(&e) != nullptr;
    if (world_size > 1) {
      std::fprintf(stderr, "dptrain: %serror on rank %d of %d: %s\n", ours ? "" : "unexpected ", rank, world_size,
                   e.what());
      std::fflush(stderr);
      // The other ranks may be waiting in a collective this rank will never join: end them all.
      MPI_Abort(MPI_COMM_WORLD, ours ? 1 : 2);
    }
    std::fprintf(stderr, "dptrain: %serror: %s\n", ours ? "" : "unexpected ", e.what());
    return ours ? 1 : 2;
  }
}
