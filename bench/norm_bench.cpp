// CPU batch norm alone at ResNet-50's shapes (224×224, batch 8), float32, NCHW and channels-last:
// the training forward (statistics, then y; with the relu epilogue, as the bottlenecks run it) and
// the backward (sums, then dx, dweight, dbias). JSON lines on stdout, one per (shape, layout, pass).
//   norm_bench [--threads 2] [--iters 20] [--warmup 5] [--only PREFIX]
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

using dp::bench::print_pass_timing;

namespace {

struct NormCase {
  const char* name;
  dp::Shape x;
};

// Every batch norm width ResNet-50 has, each at its spatial size.
const NormCase kCases[] = {
    {"rn50.bn64x112", {8, 64, 112, 112}}, {"rn50.bn64x56", {8, 64, 56, 56}},   {"rn50.bn256x56", {8, 256, 56, 56}},
    {"rn50.bn128x28", {8, 128, 28, 28}},  {"rn50.bn512x28", {8, 512, 28, 28}}, {"rn50.bn256x14", {8, 256, 14, 14}},
    {"rn50.bn1024x14", {8, 1024, 14, 14}}, {"rn50.bn512x7", {8, 512, 7, 7}},   {"rn50.bn2048x7", {8, 2048, 7, 7}},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU batch norm forward/backward at ResNet-50 shapes, NCHW and channels-last (JSON lines)",
               "norm_bench"};
  dp::bench::CommonOptions opt;
  dp::bench::add_common_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  dp::Runtime runtime(dp::bench::runtime_options(opt.threads));
  dp::Device cpu = runtime.cpu();
  dp::Backend& be = cpu.backend();
  dp::Generator gen(0);

  for (const NormCase& c : kCases) {
    if (!opt.selected(c.name)) continue;
    const int64_t C = c.x[1];
    for (const dp::MemoryFormat format : {dp::MemoryFormat::Contiguous, dp::MemoryFormat::ChannelsLast}) {
      const std::string name =
          std::string(c.name) + (format == dp::MemoryFormat::ChannelsLast ? "_cl" : "");
      const dp::Tensor x = dp::randn(c.x, gen, dp::kFloat32, cpu).contiguous(format);
      const dp::Tensor dy = dp::randn(c.x, gen, dp::kFloat32, cpu).contiguous(format);
      const dp::Tensor y = dp::Tensor::empty(c.x, dp::kFloat32, cpu, format);
      const dp::Tensor dx = dp::Tensor::empty(c.x, dp::kFloat32, cpu, format);
      const dp::Tensor w = dp::ones({C}, dp::kFloat32, cpu), b = dp::zeros({C}, dp::kFloat32, cpu);
      const dp::Tensor rm = dp::zeros({C}, dp::kFloat32, cpu), rv = dp::ones({C}, dp::kFloat32, cpu);
      const dp::Tensor sm = dp::empty({C}, dp::kFloat32, cpu), si = dp::empty({C}, dp::kFloat32, cpu);
      const dp::Tensor dw = dp::empty({C}, dp::kFloat32, cpu), db = dp::empty({C}, dp::kFloat32, cpu);
      print_pass_timing(name.c_str(), "forward_relu", dp::bench::time_it([&] {
                          be.batch_norm_forward(x, w, b, rm, rv, y, sm, si, /*training=*/true, 0.1, 1e-5,
                                                dp::BatchNormEpilogue{dp::Tensor(), /*relu=*/true});
                        }, opt.warmup, opt.iters));
      print_pass_timing(name.c_str(), "backward", dp::bench::time_it([&] {
                          be.batch_norm_backward(dy, x, w, sm, si, dx, dw, db, /*training=*/true, {});
                        }, opt.warmup, opt.iters));
    }
  }
  return 0;
}
