// What an NVTX range costs dptrain (NOTE [ NVTX ranges ] in runtime/core/nvtx.h): nanoseconds per
// push and pop through dp::nvtx, and per module forward range, without a tool attached (the default) or with whatever tool
// NVTX_INJECTION64_PATH names (e.g. build/tests/libnvtx_recorder.so with NVTX_RECORDER_FILE).
//   nvtx_bench [--ranges 10000000]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "runtime/core/nvtx.h"

int main(int argc, char** argv) {
  CLI::App app{"NVTX push+pop cost through dp::nvtx (JSON line)", "nvtx_bench"};
  int64_t ranges = 10000000;
  app.add_option("--ranges", ranges, "push+pop pairs to time")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!dp::nvtx::enabled()) {
    std::fprintf(stderr, "nvtx_bench: this build has no NVTX (no CUDA toolkit with nvtx3 headers)\n");
    return 2;
  }
  dp::nvtx::push("first");  // NVTX's first call looks for a tool: not timed
  dp::nvtx::pop();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < ranges; ++i) {
    dp::nvtx::push("forward");
    dp::nvtx::pop();
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  const char* tool = std::getenv("NVTX_INJECTION64_PATH");
  std::printf("{\"name\": \"nvtx_push_pop\", \"tool\": \"%s\", \"ns_per_range\": %.2f, \"ranges\": %lld}\n",
              tool != nullptr ? tool : "", ns / static_cast<double>(ranges), static_cast<long long>(ranges));
  // A named module's forward range (nn::Module::forward_range), which every module's forward opens:
  // a flag test without a tool; with one, a range and the thread's current module.
  const auto module = std::make_shared<const std::string>("layer1.0.conv1");
  const auto module_start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < ranges; ++i) {
    const dp::nvtx::ModuleRange range(module);
  }
  const double module_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - module_start).count();
  std::printf("{\"name\": \"nvtx_module_range\", \"tool\": \"%s\", \"ns_per_range\": %.2f, \"ranges\": %lld}\n",
              tool != nullptr ? tool : "", module_ns / static_cast<double>(ranges), static_cast<long long>(ranges));
  return 0;
}
