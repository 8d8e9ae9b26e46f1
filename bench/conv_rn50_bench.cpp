// Convolution kernels alone at ResNet-50's layer shapes (torchvision v1.5, 224×224, batch 8),
// float32, as conv_bench does for ResNet-18 on 32×32: forward, input gradient (not for the stem)
// and weight gradient. DPTRAIN_CPU_CONV=im2col|onednn|auto picks the path (NOTE [ CPU
// convolution on oneDNN ]). bench/conv_rn50_reference.py prints PyTorch's figures alike.
//   conv_rn50_bench [--threads 2] [--iters 5] [--warmup 1] [--only PREFIX]
#include <cstdio>

#include "bench/bench_util.h"
#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

using dp::bench::print_pass_timing;

namespace {

struct ConvCase {
  const char* name;
  int64_t C, HW, K, k, stride;  // input channels and size, output channels, kernel, stride
};

// Every distinct conv of ResNet-50 (v1.5: strides on the 3×3 convs), batch 8 (same list in
// conv_rn50_reference.py).
const ConvCase kConvs[] = {
    {"r50.conv1", 3, 224, 64, 7, 2},
    {"r50.l1.c1a", 64, 56, 64, 1, 1},    {"r50.l1.c2", 64, 56, 64, 3, 1},     {"r50.l1.c3", 64, 56, 256, 1, 1},
    {"r50.l1.c1b", 256, 56, 64, 1, 1},   {"r50.l2.c1a", 256, 56, 128, 1, 1},  {"r50.l2.c2s2", 128, 56, 128, 3, 2},
    {"r50.l2.c3", 128, 28, 512, 1, 1},   {"r50.l2.ds", 256, 56, 512, 1, 2},   {"r50.l2.c1b", 512, 28, 128, 1, 1},
    {"r50.l2.c2", 128, 28, 128, 3, 1},   {"r50.l3.c1a", 512, 28, 256, 1, 1},  {"r50.l3.c2s2", 256, 28, 256, 3, 2},
    {"r50.l3.c3", 256, 14, 1024, 1, 1},  {"r50.l3.ds", 512, 28, 1024, 1, 2},  {"r50.l3.c1b", 1024, 14, 256, 1, 1},
    {"r50.l3.c2", 256, 14, 256, 3, 1},   {"r50.l4.c1a", 1024, 14, 512, 1, 1}, {"r50.l4.c2s2", 512, 14, 512, 3, 2},
    {"r50.l4.c3", 512, 7, 2048, 1, 1},   {"r50.l4.ds", 1024, 14, 2048, 1, 2}, {"r50.l4.c1b", 2048, 7, 512, 1, 1},
    {"r50.l4.c2", 512, 7, 512, 3, 1},
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Convolution kernel times at ResNet-50 224x224 batch-8 shapes (JSON lines)", "conv_rn50_bench"};
  dp::bench::CommonOptions opt;
  opt.warmup = 1;
  opt.iters = 5;
  dp::bench::add_common_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  dp::Runtime runtime(dp::bench::runtime_options(opt.threads));
  dp::Device cpu = runtime.cpu();
  dp::Backend& be = cpu.backend();
  dp::Generator gen(0);
  const int64_t N = 8;
  for (const ConvCase& c : kConvs) {
    if (!opt.selected(c.name)) continue;
    dp::Conv2dParams p;
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.k / 2;
    const int64_t OHW = (c.HW + 2 * p.pad_h - c.k) / c.stride + 1;
    dp::Tensor x = dp::randn({N, c.C, c.HW, c.HW}, gen, dp::kFloat32, cpu);
    dp::Tensor w = dp::randn({c.K, c.C, c.k, c.k}, gen, dp::kFloat32, cpu);
    dp::Tensor y = dp::empty({N, c.K, OHW, OHW}, dp::kFloat32, cpu), dy = dp::randn({N, c.K, OHW, OHW}, gen, dp::kFloat32, cpu);
    dp::Tensor dx = dp::empty(x.shape(), dp::kFloat32, cpu), dw = dp::empty(w.shape(), dp::kFloat32, cpu);
    print_pass_timing(c.name, "forward", dp::bench::time_it([&] { be.conv2d_forward(x, w, dp::Tensor(), y, p); }, opt.warmup, opt.iters));
    if (c.C != 3)
      print_pass_timing(c.name, "backward_input",
             dp::bench::time_it([&] { be.conv2d_backward_input(dy, w, dx, p, false); }, opt.warmup, opt.iters));
    print_pass_timing(c.name, "backward_weight",
           dp::bench::time_it([&] { be.conv2d_backward_weight(dy, x, dw, dp::Tensor(), p); }, opt.warmup, opt.iters));
  }
  return 0;
}
