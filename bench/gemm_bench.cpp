// f32 GEMM throughput through the CPU backend (OpenBLAS and Eigen paths), as JSON lines:
//   gemm_bench [--threads 2] [--size 2048] [--iters 10]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/bench_util.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

int main(int argc, char** argv) {
  int threads = 2, iters = 10;
  int64_t n = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--size")) n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  for (dp::CpuGemm lib : {dp::CpuGemm::OpenBlas, dp::CpuGemm::Eigen}) {
    dp::CpuBackend backend(threads, lib);
    dp::Device cpu(&backend);
    dp::Generator gen(0);
    dp::Tensor a = dp::rand({n, n}, gen, dp::kFloat32, cpu), b = dp::rand({n, n}, gen, dp::kFloat32, cpu);
    dp::Tensor c = dp::empty({n, n}, dp::kFloat32, cpu);
    auto t = dp::bench::time_it([&] { backend.gemm(a, b, c, 1.0, 0.0); }, 2, iters);
    double gflops = 2.0 * n * n * n / (t.median_ms * 1e-3) / 1e9;
    std::printf("{\"name\": \"sgemm_%lld_%s\", \"threads\": %d, \"median_ms\": %.3f, \"gflops\": %.1f}\n",
                static_cast<long long>(n), lib == dp::CpuGemm::OpenBlas ? "openblas" : "eigen", threads,
                t.median_ms, gflops);
  }
  return 0;
}
