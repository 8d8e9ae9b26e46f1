// Memory formats (NOTE [ Channels-last ]): strides, what a tensor suggests, conversions and their
// gradients, and the one-format-per-call rule kernels rely on.
#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/tensor.h"

namespace dp {
namespace {

class MemoryFormatTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};

  // [N, C, H, W] with element (n, c, h, w) = 1000n + 100c + 10h + w, NCHW-contiguous.
  Tensor numbered(const Shape& s) {
    std::vector<double> v;
    for (int64_t n = 0; n < s[0]; ++n)
      for (int64_t c = 0; c < s[1]; ++c)
        for (int64_t h = 0; h < s[2]; ++h)
          for (int64_t w = 0; w < s[3]; ++w) v.push_back(1000.0 * n + 100.0 * c + 10.0 * h + w);
    return from_vector(v, s, cpu);
  }
};

TEST_F(MemoryFormatTest, ChannelsLastStridesPutAPixelsChannelsTogether) {
  EXPECT_EQ(strides_for({2, 3, 4, 5}, MemoryFormat::ChannelsLast), (Shape{60, 1, 15, 3}));
  EXPECT_EQ(strides_for({2, 3, 4, 5}, MemoryFormat::Contiguous), (Shape{60, 20, 5, 1}));
  const Tensor t = Tensor::empty({2, 3, 4, 5}, kFloat32, cpu, MemoryFormat::ChannelsLast);
  EXPECT_EQ(t.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_TRUE(t.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_ERROR_CONTAINS(Tensor::empty({2, 3, 4}, kFloat32, cpu, MemoryFormat::ChannelsLast),
                        "channels_last needs a 4-D shape");
}

TEST_F(MemoryFormatTest, ConversionKeepsValuesAndLaysThemOutNhwc) {
  const Tensor x = numbered({2, 3, 2, 2});
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(cl.to_vector<double>(), x.to_vector<double>());  // the same logical tensor
  // In memory: pixel (0, 0, 0) holds channels 0, 1, 2, then pixel (0, 0, 1).
  const double* raw = cl.data<double>();
  EXPECT_EQ((std::vector<double>{raw[0], raw[1], raw[2], raw[3]}), (std::vector<double>{0, 100, 200, 1}));
  EXPECT_TRUE(cl.contiguous(MemoryFormat::ChannelsLast).same(cl));  // already: itself
  const Tensor back = cl.contiguous();
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_EQ(back.to_vector<double>(), x.to_vector<double>());
  // A dtype cast keeps the format (PyTorch's preserve_format).
  EXPECT_EQ(cl.to(kFloat32).suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_EQ(x.to(kFloat32).suggest_memory_format(), MemoryFormat::Contiguous);
}

// C = 1 or H = W = 1: NCHW and NHWC are the same memory; the strides say which was meant, and
// converting costs no copy.
TEST_F(MemoryFormatTest, AmbiguousShapesKeepTheirIntentWithoutACopy) {
  const Tensor gray = numbered({4, 1, 3, 3});
  EXPECT_EQ(gray.suggest_memory_format(), MemoryFormat::Contiguous);
  EXPECT_TRUE(gray.is_contiguous(MemoryFormat::ChannelsLast));
  const Tensor gray_cl = gray.contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(gray_cl.storage(), gray.storage());  // a restrided view
  EXPECT_EQ(gray_cl.suggest_memory_format(), MemoryFormat::ChannelsLast);
  EXPECT_TRUE(gray_cl.is_contiguous());  // still dense in NCHW order too
  const Tensor pooled = numbered({2, 5, 1, 1}).contiguous(MemoryFormat::ChannelsLast);
  EXPECT_EQ(pooled.suggest_memory_format(), MemoryFormat::ChannelsLast);
  // A classifier head flattens it without a copy, in PyTorch's (C, H, W) order.
  const Tensor flat = pooled.flatten(1);
  EXPECT_EQ(flat.storage(), pooled.storage());
  EXPECT_EQ(flat.to_vector<double>(), (std::vector<double>{0, 100, 200, 300, 400, 1000, 1100, 1200, 1300, 1400}));
}

// Tensor::to(Device) keeps channels-last, as PyTorch's preserve_format (a second CPU backend is
// another device: the copy takes the cross-device path a GPU's does); a view that is dense in
// neither order arrives contiguous; gradients come back to the source.
TEST_F(MemoryFormatTest, MovingToAnotherDeviceKeepsChannelsLast) {
  CpuBackend other_backend(1);
  const Device other(&other_backend);
  const Tensor x = numbered({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast).set_requires_grad(true);
  const Tensor moved = x.to(other);
  EXPECT_EQ(moved.device(), other);
  EXPECT_TRUE(moved.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_FALSE(moved.is_contiguous());
  EXPECT_EQ(moved.to_vector<double>(), x.to_vector<double>());
  const Tensor nchw = numbered({2, 3, 4, 5});
  EXPECT_TRUE(nchw.to(other).is_contiguous());
  const Tensor narrowed = nchw.narrow(3, 1, 3);  // dense in neither order
  const Tensor narrowed_moved = narrowed.to(other);
  EXPECT_TRUE(narrowed_moved.is_contiguous());
  EXPECT_EQ(narrowed_moved.to_vector<double>(), narrowed.to_vector<double>());
  const Tensor half_batch = x.detach().narrow(0, 1, 1);  // channels-last at an offset
  EXPECT_EQ(half_batch.to(other).to_vector<double>(), half_batch.to_vector<double>());
  sum(mul(moved, 2.0)).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().device(), cpu);
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(x.numel(), 2.0));
}

TEST_F(MemoryFormatTest, FlattenOfAChannelsLastMapIsInNchwOrder) {
  const Tensor x = numbered({1, 2, 2, 2});
  const Tensor flat = x.contiguous(MemoryFormat::ChannelsLast).flatten(1);  // needs a copy
  EXPECT_EQ(flat.to_vector<double>(), x.flatten(1).to_vector<double>());
}

TEST_F(MemoryFormatTest, GradientsFlowThroughConversions) {
  Tensor x = numbered({2, 3, 2, 2});
  x.set_requires_grad(true);
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  Tensor weights = numbered({2, 3, 2, 2});
  sum(mul(cl, weights)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), weights.to_vector<double>());
  Tensor g = numbered({3, 1, 2, 2});
  g.set_requires_grad(true);
  sum(mul(g.contiguous(MemoryFormat::ChannelsLast), 2.0)).backward();  // the restrided view's gradient
  EXPECT_EQ(g.grad().to_vector<double>(), std::vector<double>(12, 2.0));
}

TEST_F(MemoryFormatTest, PointwiseResultsKeepChannelsLast) {
  const Tensor a = numbered({2, 3, 2, 2}).contiguous(MemoryFormat::ChannelsLast);
  const Tensor b = numbered({2, 3, 2, 2});
  const Tensor bias = from_vector<double>({1, 2, 3}, {1, 3, 1, 1}, cpu);
  for (const Tensor& r : {relu(a), mul(a, 2.0), add(a, a), add(a, b), add(b, a), add(a, bias)}) {
    EXPECT_EQ(r.suggest_memory_format(), MemoryFormat::ChannelsLast) << r.str();
    EXPECT_TRUE(r.is_contiguous(MemoryFormat::ChannelsLast));
  }
  EXPECT_EQ(add(a, b).to_vector<double>(), add(b, b).to_vector<double>());
  EXPECT_EQ(add(a, bias).to_vector<double>(), add(b, bias).to_vector<double>());
  EXPECT_EQ(add(b, b).suggest_memory_format(), MemoryFormat::Contiguous);
}

TEST_F(MemoryFormatTest, KernelsTakeOneFormatPerCall) {
  const Tensor nchw = Tensor::empty({2, 3, 4, 4}, kFloat32, cpu);
  const Tensor nhwc = Tensor::empty({2, 3, 4, 4}, kFloat32, cpu, MemoryFormat::ChannelsLast);
  const Tensor gray = Tensor::empty({2, 1, 4, 4}, kFloat32, cpu);  // either
  EXPECT_EQ(common_memory_format("op", {&nchw, &gray}), MemoryFormat::Contiguous);
  EXPECT_EQ(common_memory_format("op", {&nhwc, &gray}), MemoryFormat::ChannelsLast);
  EXPECT_ERROR_CONTAINS(common_memory_format("conv2d_forward", {&nchw, &nhwc}),
                        "conv2d_forward: expected every operand contiguous or every operand channels-last");
  const Tensor strided = nchw.transpose(2, 3);
  EXPECT_ERROR_CONTAINS(common_memory_format("max_pool2d", {&strided}), "max_pool2d");
}

}  // namespace
}  // namespace dp
