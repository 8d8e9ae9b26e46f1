// Helpers shared by the benchmarks: common command-line options, and timing (warm up, then the
// median of repeated runs).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/runtime.h"

namespace dp::bench {

// --threads, --iters, --warmup, --only PREFIX (run the cases whose name starts with it).
struct CommonOptions {
  int threads = 2, iters = 20, warmup = 5;
  std::string only;
  bool selected(const std::string& name) const { return name.starts_with(only); }
};

inline void add_common_options(CLI::App& app, CommonOptions& o) {
  app.add_option("--threads", o.threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--iters", o.iters, "timed iterations")->check(CLI::PositiveNumber);
  app.add_option("--warmup", o.warmup, "untimed iterations first")->check(CLI::NonNegativeNumber);
  app.add_option("--only", o.only, "run only the cases whose name starts with this");
}

// A runtime's options with `threads` CPU threads and the rest at their defaults.
inline RuntimeOptions runtime_options(int threads) {
  RuntimeOptions options;
  options.cpu_threads = threads;
  return options;
}

// The device --device names (cpu, cuda, cuda:N), or nothing after a message on stderr naming
// `program` (no such device, no GPU visible): the caller then exits with status 2.
inline std::optional<Device> open_device(Runtime& runtime, const std::string& spec, const char* program) {
  try {
    return runtime.device(spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return std::nullopt;
  }
}

struct Timing {
  double median_ms = 0, min_ms = 0;
  int iters = 0;
};

inline Timing time_it(const std::function<void()>& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  ms.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), iters};
}

// GPU timing: `warmup` steps, then `iters` samples of `block` steps each, queued back to back
// between two device synchronisations (a step only queues kernels); milliseconds per step.
// `synchronize` is the device's (Backend::synchronize).
inline Timing time_blocks(const std::function<void()>& step, const std::function<void()>& synchronize, int warmup,
                          int iters, int block) {
  for (int i = 0; i < warmup; ++i) step();
  synchronize();
  std::vector<double> ms;
  ms.reserve(iters);
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < block; ++k) step();
    synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / block);
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), iters};
}

// One JSON line for a kernel pass: {"name": ..., "pass": ..., "median_ms": ..., "min_ms": ...}.
inline void print_pass_timing(const char* name, const char* pass, const Timing& t) {
  std::printf("{\"name\": \"%s\", \"pass\": \"%s\", \"median_ms\": %.3f, \"min_ms\": %.3f}\n", name, pass,
              t.median_ms, t.min_ms);
  std::fflush(stdout);
}

}  // namespace dp::bench
