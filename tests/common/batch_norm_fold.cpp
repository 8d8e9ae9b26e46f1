#include "common/batch_norm_fold.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/expect_error.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/tensor/generator.h"

namespace dp::testing {

namespace {

// t's bytes in memory order (the two sides are laid out alike).
std::vector<unsigned char> bytes_of(const Tensor& t, Device host) {
  const Tensor h = t.to(host);
  std::vector<unsigned char> out(h.nbytes());
  std::memcpy(out.data(), h.raw_data(), h.nbytes());
  return out;
}

struct Gradients {
  Tensor masked, dx, dweight, dbias;
};

// One backward of bn → add → relu given y, dy, x and the statistics: folded or in two passes.
Gradients backward(Backend& be, bool fold, const Tensor& y, const Tensor& dy, const Tensor& x, const Tensor& weight,
                   const Tensor& mean, const Tensor& invstd, MemoryFormat format) {
  Gradients g;
  g.masked = Tensor::empty(dy.shape(), dy.dtype(), dy.device(), format);
  g.dx = Tensor::empty(x.shape(), x.dtype(), x.device(), format);
  g.dweight = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  g.dbias = Tensor::empty(weight.shape(), weight.dtype(), weight.device());
  BatchNormGradPrologue prologue;
  if (fold) {
    prologue.relu_output = y;
    prologue.masked_dy = g.masked;
    be.batch_norm_backward(dy, x, weight, mean, invstd, g.dx, g.dweight, g.dbias, true, prologue);
  } else {
    const auto flat = [](const Tensor& t) { return t.detached_as_strided({t.numel()}, {1}); };
    be.unary_backward(UnaryOp::Relu, flat(y), flat(y), flat(dy), flat(g.masked));
    be.batch_norm_backward(g.masked, x, weight, mean, invstd, g.dx, g.dweight, g.dbias, true, prologue);
  }
  return g;
}

}  // namespace

void expect_relu_mask_fold_matches_two_passes(Device device, Device host) {
  struct Case {
    Shape shape;
    MemoryFormat format;
  };
  const std::vector<Case> cases{
      {{4, 16, 6, 6}, MemoryFormat::Contiguous},     // run kernels, vector width
      {{3, 5, 7, 3}, MemoryFormat::Contiguous},      // odd planes: scalar
      {{4, 16, 4, 8}, MemoryFormat::Contiguous},     // planes of 32: bfloat16's 16-byte masked stores
      {{4, 32, 6, 6}, MemoryFormat::ChannelsLast},   // columns, vector width
      {{5, 13, 5, 3}, MemoryFormat::ChannelsLast},   // odd channels: scalar columns
      {{64, 24, 8, 8}, MemoryFormat::ChannelsLast},  // rows enough for several walks per split
  };
  Generator gen(91);
  Backend& be = device.backend();
  for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    const DType stats = dtype == kFloat64 ? kFloat64 : kFloat32;
    for (const Case& c : cases) {
      const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(c.shape) +
                               (c.format == MemoryFormat::ChannelsLast ? " channels-last" : " NCHW");
      // On a GPU the two-pass reference's NCHW batch norm runs cuDNN except in bfloat16 (the fold
      // never does), whose sums and dx differ from norm.cu's in rounding.
      if (!device.is_cpu() && c.format == MemoryFormat::Contiguous && dtype != kBFloat16) continue;
      SCOPED_TRACE(what);
      const int64_t C = c.shape[1];
      const Tensor x = randn(c.shape, gen, kFloat32, host).to(dtype).to(device).contiguous(c.format);
      // y as a relu output: about half exact zeros.
      const Tensor y = relu(randn(c.shape, gen, kFloat32, host)).to(dtype).to(device).contiguous(c.format);
      const Tensor dy = randn(c.shape, gen, kFloat32, host).to(dtype).to(device).contiguous(c.format);
      const Tensor weight = rand({C}, gen, stats, host, 0.5, 1.5).to(device);
      const Tensor mean = randn({C}, gen, stats, host).to(device);
      const Tensor invstd = rand({C}, gen, stats, host, 0.5, 2.0).to(device);
      const Gradients folded = backward(be, true, y, dy, x, weight, mean, invstd, c.format);
      const Gradients two = backward(be, false, y, dy, x, weight, mean, invstd, c.format);
      EXPECT_TRUE(folded.masked.is_contiguous(c.format));
      EXPECT_EQ(bytes_of(folded.masked, host), bytes_of(two.masked, host)) << "masked gradient";
      EXPECT_EQ(bytes_of(folded.dx, host), bytes_of(two.dx, host)) << "dx";
      EXPECT_EQ(bytes_of(folded.dweight, host), bytes_of(two.dweight, host)) << "dweight";
      EXPECT_EQ(bytes_of(folded.dbias, host), bytes_of(two.dbias, host)) << "dbias";
    }
  }
}

void expect_relu_mask_fold_refusals(Device device) {
  const Shape shape{2, 3, 4, 4};
  Backend& be = device.backend();
  const Tensor x = ones(shape, kFloat32, device), dy = ones(shape, kFloat32, device), y = ones(shape, kFloat32, device);
  const Tensor stat = ones({3}, kFloat32, device);
  const Tensor dx = Tensor::empty(shape, kFloat32, device), dw = Tensor::empty({3}, kFloat32, device);
  const Tensor masked = Tensor::empty(shape, kFloat32, device);
  BatchNormGradPrologue fold;
  fold.relu_output = y;
  fold.masked_dy = masked;
  EXPECT_ERROR_CONTAINS(be.batch_norm_backward(dy, x, stat, stat, stat, dx, dw, Tensor(), false, fold),
                        "folded into the training pass that takes the sums");
  EXPECT_ERROR_CONTAINS(be.batch_norm_backward(dy, x, stat, stat, stat, Tensor(), Tensor(), Tensor(), true, fold),
                        "folded into the training pass that takes the sums");
  BatchNormGradPrologue both = fold;
  both.relu = true;
  EXPECT_ERROR_CONTAINS(be.batch_norm_backward(dy, x, stat, stat, stat, dx, dw, Tensor(), true, both),
                        "folded into the training pass that takes the sums");
  BatchNormGradPrologue other_layout = fold;
  other_layout.masked_dy = Tensor::empty(shape, kFloat32, device, MemoryFormat::ChannelsLast);
  EXPECT_ERROR_CONTAINS(be.batch_norm_backward(dy, x, stat, stat, stat, dx, dw, Tensor(), true, other_layout),
                        "must be laid out as the gradient");
  BatchNormGradPrologue no_output;
  no_output.masked_dy = masked;
  EXPECT_ERROR_CONTAINS(be.batch_norm_backward(dy, x, stat, stat, stat, dx, dw, Tensor(), true, no_output),
                        "masked_dy without relu_output");
}

}  // namespace dp::testing
