// GEMM throughput through the CPU backend as JSON lines: float32 through oneDNN, OpenBLAS and
// Eigen (NOTE [ CPU float32 GEMM on oneDNN ] in runtime/backend/cpu/gemm.cpp), bfloat16 through
// oneDNN; an n x n x n product, then (unless --square-only) BERT-tiny's shapes on a step of 3,800
// tokens and 570 predictions over a vocabulary of 8,079: the layers' forward, input- and
// weight-gradient products and the MLM decoder's.
//   gemm_bench [--threads 2] [--size 2048] [--iters 10] [--square-only]
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace {

struct Product {
  const char* name;
  int64_t M, N, K;
  bool ta, tb;  // operand stored transposed (a weight read as W^T, an activation read as X^T)
};

const char* library_name(dp::CpuGemm lib) {
  switch (lib) {
    case dp::CpuGemm::OneDnn: return "onednn";
    case dp::CpuGemm::OpenBlas: return "openblas";
    case dp::CpuGemm::Eigen: return "eigen";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU GEMM throughput per library (JSON lines)", "gemm_bench"};
  dp::bench::CommonOptions opt;
  opt.iters = 10;
  int64_t n = 2048;
  bool square_only = false;
  dp::bench::add_common_options(app, opt);
  app.add_option("--size", n, "matrix size n of the square product")->check(CLI::PositiveNumber);
  app.add_flag("--square-only", square_only, "only the n x n x n product");
  CLI11_PARSE(app, argc, argv);
  const int threads = opt.threads, iters = opt.iters;
  // Times c = op(a)·op(b) through `backend` and prints one JSON line.
  auto measure = [&](dp::CpuBackend& backend, dp::DType dtype, const Product& p, const std::string& library) {
    dp::Device cpu(&backend);
    dp::Generator gen(0);
    dp::Tensor a = p.ta ? dp::rand({p.K, p.M}, gen, dtype, cpu).t() : dp::rand({p.M, p.K}, gen, dtype, cpu);
    dp::Tensor b = p.tb ? dp::rand({p.N, p.K}, gen, dtype, cpu).t() : dp::rand({p.K, p.N}, gen, dtype, cpu);
    dp::Tensor c = dp::empty({p.M, p.N}, dtype, cpu);
    auto t = dp::bench::time_it([&] { backend.gemm(a, b, c, 1.0, 0.0); }, 2, iters);
    const double gflops = 2.0 * p.M * p.N * p.K / (t.median_ms * 1e-3) / 1e9;
    std::printf("{\"name\": \"%s\", \"library\": \"%s\", \"dtype\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, "
                "\"threads\": %d, \"median_ms\": %.3f, \"gflops\": %.1f}\n",
                p.name, library.c_str(), dtype == dp::kFloat32 ? "float32" : "bfloat16", static_cast<long long>(p.M),
                static_cast<long long>(p.N), static_cast<long long>(p.K), threads, t.median_ms, gflops);
  };
  const std::string square_name = "square_" + std::to_string(n);
  std::vector<Product> products = {{square_name.c_str(), n, n, n, false, false}};
  if (!square_only) {
    const std::vector<Product> bert = {
        {"qkv_forward", 3800, 128, 128, false, true},   {"ffn_in_forward", 3800, 512, 128, false, true},
        {"ffn_out_forward", 3800, 128, 512, false, true}, {"qkv_input_grad", 3800, 128, 128, false, false},
        {"ffn_in_input_grad", 3800, 128, 512, false, false}, {"qkv_weight_grad", 128, 128, 3800, true, false},
        {"ffn_in_weight_grad", 512, 128, 3800, true, false}, {"decoder_forward", 570, 8079, 128, false, true},
        {"decoder_input_grad", 570, 128, 8079, false, false}, {"decoder_weight_grad", 8079, 128, 570, true, false}};
    products.insert(products.end(), bert.begin(), bert.end());
  }
  for (const Product& p : products)
    for (dp::CpuGemm lib : {dp::CpuGemm::OneDnn, dp::CpuGemm::OpenBlas, dp::CpuGemm::Eigen}) {
      dp::CpuBackend backend(threads, lib);
      measure(backend, dp::kFloat32, p, library_name(lib));
    }
  // bfloat16 through oneDNN (float32 accumulation), when this CPU has AVX-512 BF16
  dp::CpuBackend backend(threads);
  measure(backend, dp::kBFloat16, products.front(), dp::cpu::bf16_gemm_available() ? "onednn" : "via_float32");
  return 0;
}
