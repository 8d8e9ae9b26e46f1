// GEMM throughput through the CPU backend (f32: OpenBLAS and Eigen; bf16: oneDNN), as JSON lines:
//   gemm_bench [--threads 2] [--size 2048] [--iters 10]
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

int main(int argc, char** argv) {
  CLI::App app{"f32 GEMM n x n x n through OpenBLAS and Eigen (JSON lines)", "gemm_bench"};
  dp::bench::CommonOptions opt;
  opt.iters = 10;
  int64_t n = 2048;
  dp::bench::add_common_options(app, opt);
  app.add_option("--size", n, "matrix size n")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  const int threads = opt.threads, iters = opt.iters;
  // Times c = a·b for n×n operands of `dtype` through `backend` and prints one JSON line.
  auto measure = [&](dp::CpuBackend& backend, dp::DType dtype, const std::string& name) {
    dp::Device cpu(&backend);
    dp::Generator gen(0);
    dp::Tensor a = dp::rand({n, n}, gen, dtype, cpu), b = dp::rand({n, n}, gen, dtype, cpu);
    dp::Tensor c = dp::empty({n, n}, dtype, cpu);
    auto t = dp::bench::time_it([&] { backend.gemm(a, b, c, 1.0, 0.0); }, 2, iters);
    double gflops = 2.0 * n * n * n / (t.median_ms * 1e-3) / 1e9;
    std::printf("{\"name\": \"%s\", \"threads\": %d, \"median_ms\": %.3f, \"gflops\": %.1f}\n", name.c_str(), threads,
                t.median_ms, gflops);
  };
  const std::string size = std::to_string(n);
  for (dp::CpuGemm lib : {dp::CpuGemm::OpenBlas, dp::CpuGemm::Eigen}) {
    dp::CpuBackend backend(threads, lib);
    measure(backend, dp::kFloat32, "sgemm_" + size + (lib == dp::CpuGemm::OpenBlas ? "_openblas" : "_eigen"));
  }
  // bfloat16 through oneDNN (float32 accumulation), when this CPU has AVX-512 BF16
  dp::CpuBackend backend(threads);
  measure(backend, dp::kBFloat16, "bf16gemm_" + size + (dp::cpu::bf16_gemm_available() ? "_onednn" : "_via_float32"));
  return 0;
}
