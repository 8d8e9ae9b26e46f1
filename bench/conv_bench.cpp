// Convolution and pooling kernels alone, at the shapes of SmallCNN (batch 128) and ResNet-18 on
// 32×32 images (batch 32), float32. Backward rows time what a training step runs: the input
// gradient (skipped for a network's first conv) and the weight gradient (with bias if the layer
// has one). JSON lines on stdout; bench/conv_reference.py prints PyTorch's figures alike.
//   conv_bench [--threads 2] [--iters 20] [--warmup 3] [--only PREFIX]
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

using dp::bench::print_pass_timing;

namespace {

struct ConvCase {
  const char* name;
  dp::Shape x, w;
  int64_t stride, pad;
  bool bias, input_grad;
};

// SmallCNN convs carry a bias; ResNet's do not (batch norm follows). First convs need no dx.
const ConvCase kConvs[] = {
    {"cnn.conv1", {128, 1, 28, 28}, {32, 1, 3, 3}, 1, 1, true, false},
    {"cnn.conv2", {128, 32, 14, 14}, {64, 32, 3, 3}, 1, 1, true, true},
    {"rn.conv1", {32, 3, 32, 32}, {64, 3, 7, 7}, 2, 3, false, false},
    {"rn.l1", {32, 64, 8, 8}, {64, 64, 3, 3}, 1, 1, false, true},
    {"rn.l2s2", {32, 64, 8, 8}, {128, 64, 3, 3}, 2, 1, false, true},
    {"rn.l2", {32, 128, 4, 4}, {128, 128, 3, 3}, 1, 1, false, true},
    {"rn.l2ds", {32, 64, 8, 8}, {128, 64, 1, 1}, 2, 0, false, true},
    {"rn.l3s2", {32, 128, 4, 4}, {256, 128, 3, 3}, 2, 1, false, true},
    {"rn.l3", {32, 256, 2, 2}, {256, 256, 3, 3}, 1, 1, false, true},
    {"rn.l3ds", {32, 128, 4, 4}, {256, 128, 1, 1}, 2, 0, false, true},
    {"rn.l4s2", {32, 256, 2, 2}, {512, 256, 3, 3}, 2, 1, false, true},
    {"rn.l4", {32, 512, 1, 1}, {512, 512, 3, 3}, 1, 1, false, true},
    {"rn.l4ds", {32, 256, 2, 2}, {512, 256, 1, 1}, 2, 0, false, true},
};

struct PoolCase {
  const char* name;
  dp::Shape x;
  int64_t kernel, stride, pad;
};

const PoolCase kPools[] = {
    {"cnn.pool1", {128, 32, 28, 28}, 2, 2, 0},
    {"cnn.pool2", {128, 64, 14, 14}, 2, 2, 0},
    {"rn.pool", {32, 64, 16, 16}, 3, 2, 1},
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Convolution and pooling kernel times at SmallCNN and ResNet-18 shapes (JSON lines)", "conv_bench"};
  dp::bench::CommonOptions opt;
  opt.warmup = 3;
  dp::bench::add_common_options(app, opt);
  CLI11_PARSE(app, argc, argv);
  const int threads = opt.threads, iters = opt.iters, warmup = opt.warmup;
  dp::Runtime runtime(dp::bench::runtime_options(threads));
  dp::Device cpu = runtime.cpu();
  dp::Backend& be = cpu.backend();
  dp::Generator gen(0);
  auto selected = [&](const char* name) { return opt.selected(name); };

  for (const ConvCase& c : kConvs) {
    if (!selected(c.name)) continue;
    dp::Conv2dParams p;
    p.stride_h = p.stride_w = c.stride;
    p.pad_h = p.pad_w = c.pad;
    const dp::Shape y_shape{c.x[0], c.w[0], out_size(c.x[2], c.w[2], c.stride, c.pad),
                            out_size(c.x[3], c.w[3], c.stride, c.pad)};
    dp::Tensor x = dp::randn(c.x, gen, dp::kFloat32, cpu), w = dp::randn(c.w, gen, dp::kFloat32, cpu);
    dp::Tensor b = c.bias ? dp::randn({c.w[0]}, gen, dp::kFloat32, cpu) : dp::Tensor();
    dp::Tensor y = dp::empty(y_shape, dp::kFloat32, cpu), dy = dp::randn(y_shape, gen, dp::kFloat32, cpu);
    dp::Tensor dx = dp::empty(c.x, dp::kFloat32, cpu), dw = dp::empty(c.w, dp::kFloat32, cpu);
    dp::Tensor db = c.bias ? dp::empty({c.w[0]}, dp::kFloat32, cpu) : dp::Tensor();
    print_pass_timing(c.name, "forward", dp::bench::time_it([&] { be.conv2d_forward(x, w, b, y, p); }, warmup, iters));
    if (c.input_grad)
      print_pass_timing(c.name, "backward_input",
             dp::bench::time_it([&] { be.conv2d_backward_input(dy, w, dx, p, false); }, warmup, iters));
    print_pass_timing(c.name, "backward_weight",
           dp::bench::time_it([&] { be.conv2d_backward_weight(dy, x, dw, db, p); }, warmup, iters));
  }

  for (const PoolCase& c : kPools) {
    if (!selected(c.name)) continue;
    dp::Pool2dParams p{c.kernel, c.kernel, c.stride, c.stride, c.pad, c.pad, true};
    const dp::Shape y_shape{c.x[0], c.x[1], out_size(c.x[2], c.kernel, c.stride, c.pad),
                            out_size(c.x[3], c.kernel, c.stride, c.pad)};
    dp::Tensor x = dp::randn(c.x, gen, dp::kFloat32, cpu), dx = dp::empty(c.x, dp::kFloat32, cpu);
    dp::Tensor y = dp::empty(y_shape, dp::kFloat32, cpu), dy = dp::randn(y_shape, gen, dp::kFloat32, cpu);
    dp::Tensor indices = dp::empty(y_shape, dp::kInt32, cpu);
    print_pass_timing(c.name, "forward", dp::bench::time_it([&] { be.max_pool2d_forward(x, y, indices, p); }, warmup, iters));
    print_pass_timing(c.name, "backward", dp::bench::time_it([&] { be.max_pool2d_backward(dy, indices, dx, p); }, warmup, iters));
  }
  return 0;
}
