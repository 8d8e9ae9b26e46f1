// Channels-last through the ops (NOTE [ Channels-last ]): conv2d, batch_norm, the pools and the
// pointwise ops keep a channels-last input's format, and give what the NCHW path gives — pools
// bit for bit (same operations in the same order), convolution and batch norm within float32
// rounding (other summation orders) — in every CPU convolution path and dtype. Gradients are
// checked by finite differences in float64 on channels-last inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "common/gradcheck.h"
#include "runtime/autograd/autocast.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

using testing::channels_last_copy;
using testing::gradcheck;
using testing::random_input;
using cpu::ConvPath;

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// The outputs of fn and the gradients of its inputs (backward of Σ outputs[0]·weights).
struct Run {
  std::vector<Tensor> outputs, grads;
};

Run run(const Fn& fn, const std::vector<Tensor>& inputs) {
  Run r;
  r.outputs = fn(inputs);
  Generator gen(77);
  const Tensor& y = r.outputs[0];
  const Tensor weights = rand(y.shape(), gen, kFloat64, y.device(), -1.0, 1.0).to(y.dtype());
  sum(mul(y, weights).to(kFloat64)).backward();
  for (const Tensor& t : inputs) r.grads.push_back(t.requires_grad() ? t.grad() : Tensor());
  return r;
}

// Largest |a − b| relative to max |b| (0 for equal tensors).
double relative_gap(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double gap = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    gap = std::max(gap, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return scale > 0 ? gap / scale : gap;
}

// fn on the inputs as given (NCHW) and with the 4-D ones channels-last: every 4-D output of the
// channels-last run is channels-last, and outputs and gradients agree within `tol` (0: bitwise).
void expect_formats_agree(const Fn& fn, const std::vector<Tensor>& nchw_inputs, double tol, const std::string& what) {
  std::vector<Tensor> a, b;  // fresh leaves for each run: gradients start from none
  auto fresh = [](const Tensor& t) { return t.detach().clone().set_requires_grad(t.requires_grad()); };
  for (const Tensor& t : nchw_inputs) {
    a.push_back(fresh(t));
    b.push_back(t.dim() == 4 ? channels_last_copy(t) : fresh(t));
  }
  const Run ra = run(fn, a), rb = run(fn, b);
  for (size_t i = 0; i < ra.outputs.size(); ++i) {
    const Tensor& y = rb.outputs[i];
    if (y.dim() == 4 && y.numel() > 0) {
      EXPECT_EQ(y.suggest_memory_format(), MemoryFormat::ChannelsLast) << what << ": output " << i << " " << y.str();
    }
    if (tol == 0) {
      EXPECT_EQ(y.to_vector<double>(), ra.outputs[i].to_vector<double>()) << what << ": output " << i;
    } else {
      EXPECT_LE(relative_gap(y, ra.outputs[i]), tol) << what << ": output " << i;
    }
  }
  for (size_t i = 0; i < ra.grads.size(); ++i) {
    if (!ra.grads[i].defined()) continue;
    ASSERT_TRUE(rb.grads[i].defined()) << what << ": no gradient for input " << i;
    if (tol == 0) EXPECT_EQ(rb.grads[i].to_vector<double>(), ra.grads[i].to_vector<double>()) << what << ": grad " << i;
    else EXPECT_LE(relative_gap(rb.grads[i], ra.grads[i]), tol) << what << ": gradient of input " << i;
  }
}

Conv2dParams conv_params(int64_t stride, int64_t pad, int64_t groups = 1, int64_t dilation = 1) {
  return Conv2dParams{stride, stride, pad, pad, dilation, dilation, groups};
}

Pool2dParams pool_params(int64_t kernel, int64_t stride, int64_t pad, bool count_include_pad = true) {
  return Pool2dParams{kernel, kernel, stride, stride, pad, pad, count_include_pad};
}

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

const ConvCase kConvCases[] = {
    {"3x3_pad1_bias", {2, 16, 9, 9}, {32, 16, 3, 3}, conv_params(1, 1), true},
    {"3x3_stride2", {2, 16, 9, 8}, {16, 16, 3, 3}, conv_params(2, 1), false},
    {"1x1", {3, 32, 5, 5}, {64, 32, 1, 1}, conv_params(1, 0), false},
    {"1x1_stride2_downsample", {2, 32, 6, 6}, {64, 32, 1, 1}, conv_params(2, 0), false},
    {"gray_input_C1", {4, 1, 12, 12}, {32, 1, 3, 3}, conv_params(1, 1), true},  // SmallCNN's first layer
    {"rgb_stem_7x7_stride2", {2, 3, 16, 16}, {16, 3, 7, 7}, conv_params(2, 3), false},
    {"groups2_dilation2", {2, 16, 9, 9}, {16, 8, 3, 3}, conv_params(1, 2, 2, 2), true},
    {"few_channels_2", {2, 2, 7, 7}, {3, 2, 3, 3}, conv_params(1, 1), true},  // im2col territory
};

class ChannelsLastConv : public ::testing::TestWithParam<ConvPath> {};

TEST_P(ChannelsLastConv, MatchesNchwInEveryPath) {
  CpuBackend backend(2, std::nullopt, GetParam());
  Device cpu(&backend);
  for (const ConvCase& c : kConvCases) {
    Generator gen(5);
    const Tensor x = random_input(c.x, gen, cpu).to(kFloat32).detach().set_requires_grad(true);
    const Tensor w = random_input(c.w, gen, cpu).to(kFloat32).detach().set_requires_grad(true);
    const Tensor b = random_input({c.w[0]}, gen, cpu).to(kFloat32).detach().set_requires_grad(true);
    const Conv2dParams p = c.p;
    const bool bias = c.bias;
    expect_formats_agree([p, bias](const std::vector<Tensor>& v) { return std::vector<Tensor>{conv2d(v[0], v[1], bias ? v[2] : Tensor(), p)}; },
                         {x, w, b}, 2e-6, c.name);
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, ChannelsLastConv, ::testing::Values(ConvPath::Auto, ConvPath::Dnnl, ConvPath::Im2col),
                         [](const ::testing::TestParamInfo<ConvPath>& i) {
                           return i.param == ConvPath::Auto ? "auto" : i.param == ConvPath::Dnnl ? "onednn" : "im2col";
                         });

class ChannelsLastOps : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};

  Tensor input(const Shape& shape, uint64_t seed, DType dtype = kFloat32) {
    Generator gen(seed);
    return random_input(shape, gen, cpu).to(dtype).detach().set_requires_grad(true);
  }
};

TEST_F(ChannelsLastOps, ConvInHalfPrecisionMatchesNchw) {
  for (const DType dtype : {kBFloat16, kFloat16}) {
    const Tensor x = input({2, 16, 7, 7}, 1, dtype), w = input({16, 16, 3, 3}, 2, dtype);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{conv2d(v[0], v[1], Tensor(), conv_params(1, 1))}; },
                         {x, w}, 1e-2, dtype_name(dtype));
  }
}

TEST_F(ChannelsLastOps, PoolsAreBitIdenticalToNchw) {
  for (const DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    const Tensor x = input({2, 5, 9, 8}, 3, dtype);
    const std::string d = dtype_name(dtype);
    expect_formats_agree([](const std::vector<Tensor>& v) {
      auto [y, idx] = max_pool2d_with_indices(v[0], pool_params(3, 2, 1));
      return std::vector<Tensor>{y, idx};
    }, {x}, 0, "max_pool2d 3x3/2 pad 1 " + d);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{max_pool2d(v[0], pool_params(2, 1, 0))}; },
                         {x}, 0, "max_pool2d 2x2/1 overlapping " + d);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{avg_pool2d(v[0], pool_params(3, 2, 1, false))}; },
                         {x}, 0, "avg_pool2d exclude pad " + d);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{avg_pool2d(v[0], pool_params(2, 2, 0))}; },
                         {x}, 0, "avg_pool2d 2x2 " + d);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{adaptive_avg_pool2d(v[0], 1, 1)}; },
                         {x}, 0, "adaptive_avg_pool2d global " + d);
    expect_formats_agree([](const std::vector<Tensor>& v) { return std::vector<Tensor>{adaptive_avg_pool2d(v[0], 4, 3)}; },
                         {x}, 0, "adaptive_avg_pool2d 4x3 " + d);
  }
}

TEST_F(ChannelsLastOps, BatchNormMatchesNchwInTrainingAndEval) {
  for (const DType dtype : {kFloat32, kBFloat16}) {
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-2;
    const Tensor x = input({4, 24, 5, 3}, 4, dtype);
    const Tensor w = input({24}, 5), b = input({24}, 6);
    for (const bool training : {true, false}) {
      // Running statistics: fresh per run, so both formats start from the same values.
      expect_formats_agree([training](const std::vector<Tensor>& v) {
        Tensor mean = full({24}, 0.1, kFloat32, v[0].device()), var = full({24}, 2.0, kFloat32, v[0].device());
        const Tensor y = batch_norm(v[0], v[1], v[2], mean, var, training, 0.1, 1e-5);
        return std::vector<Tensor>{y, mean, var};
      }, {x, w, b}, tol, std::string("batch_norm ") + dtype_name(dtype) + (training ? " training" : " eval"));
    }
  }
}

// The CPU kernels' two channels-last walks (NOTE [ Channels-last batch norm in tiles ]): narrow
// blocks in tiles (40 channels over two threads: chunks of 16 and a last one of 4; 1144 rows: 17
// tiles of 64 and one of 56), wide blocks row by row (600 channels: 300 a thread). Forward with
// the fused epilogues and backward through them (relu alone takes the backward's relu prologue).
TEST_F(ChannelsLastOps, BatchNormTiledAndWideBlocksMatchNchw) {
  for (const Shape& shape : {Shape{8, 40, 13, 11}, Shape{2, 600, 5, 7}}) {
    ASSERT_GE(numel_of(shape), cpu::kParallelGrain) << "two threads, so two blocks";
    const int64_t C = shape[1];
    const Tensor x = input(shape, 21), residual = input(shape, 22), w = input({C}, 23), b = input({C}, 24);
    const std::string name = "batch_norm " + shape_str(shape);
    expect_formats_agree([](const std::vector<Tensor>& v) {
      return std::vector<Tensor>{batch_norm_add_relu(v[0], v[1], v[2], v[3], Tensor(), Tensor(), true, 0.1, 1e-5)};
    }, {x, residual, w, b}, 1e-5, name + " + residual, relu");
    expect_formats_agree([](const std::vector<Tensor>& v) {
      return std::vector<Tensor>{batch_norm_add_relu(v[0], Tensor(), v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5)};
    }, {x, w, b}, 1e-5, name + " relu");
    expect_formats_agree([](const std::vector<Tensor>& v) {
      Tensor mean = full({v[1].size(0)}, 0.1, kFloat32, v[0].device());
      Tensor var = full({v[1].size(0)}, 2.0, kFloat32, v[0].device());
      return std::vector<Tensor>{batch_norm(v[0], v[1], v[2], mean, var, true, 0.1, 1e-5), mean, var};
    }, {x, w, b}, 1e-5, name);
  }
}

TEST_F(ChannelsLastOps, GradientsOfChannelsLastInputsMatchFiniteDifferences) {
  Generator gen(9);
  const Tensor x = channels_last_copy(random_input({2, 3, 5, 5}, gen, cpu));
  const Tensor w = random_input({4, 3, 3, 3}, gen, cpu), bias = random_input({4}, gen, cpu);
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1)); },
                             {x, w, bias}));
  const Tensor bn_w = random_input({3}, gen, cpu), bn_b = random_input({3}, gen, cpu);
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) {
    return batch_norm(v[0], v[1], v[2], Tensor(), Tensor(), true, 0.1, 1e-5);
  }, {x, bn_w, bn_b}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return avg_pool2d(v[0], pool_params(3, 2, 1)); }, {x}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return adaptive_avg_pool2d(v[0], 2, 3); }, {x}));
  EXPECT_GRADCHECK(gradcheck([](const std::vector<Tensor>& v) { return relu(add(v[0], mul(v[0], v[0]))); }, {x}));
}

// A residual block and a classifier head, as ResNet strings them: conv → bn → relu → conv → bn
// → add → relu → max pool → global average → flatten → linear, with every gradient compared.
TEST_F(ChannelsLastOps, AResidualNetworkGivesTheNchwLossAndGradients) {
  const Tensor x = input({4, 8, 10, 10}, 10);
  const Tensor w1 = input({8, 8, 3, 3}, 11), w2 = input({8, 8, 3, 3}, 12);
  const Tensor g1 = input({8}, 13), b1 = input({8}, 14), g2 = input({8}, 15), b2 = input({8}, 16);
  const Tensor fc = input({5, 8}, 17);
  expect_formats_agree([](const std::vector<Tensor>& v) {
    auto bn = [](const Tensor& t, const Tensor& g, const Tensor& b) {
      return batch_norm(t, g, b, Tensor(), Tensor(), true, 0.1, 1e-5);
    };
    Tensor h = relu(bn(conv2d(v[0], v[1], Tensor(), conv_params(1, 1)), v[3], v[4]));
    h = bn(conv2d(h, v[2], Tensor(), conv_params(1, 1)), v[5], v[6]);
    h = relu(add(h, v[0]));
    h = adaptive_avg_pool2d(max_pool2d(h, pool_params(3, 2, 1)), 1, 1);
    return std::vector<Tensor>{linear(h.flatten(1), v[7])};
  }, {x, w1, w2, g1, b1, g2, b2, fc}, 2e-5, "residual block");
}

}  // namespace
}  // namespace dp
