// conv2d: finite-difference gradients in float64, a direct-sum reference across batch sizes
// (the kernels chunk images, NOTE [ Convolution as chunked GEMM ]), PyTorch fixtures, and errors.
#include <gtest/gtest.h>

#include "common/expect_error.h"
#include "common/gradcheck.h"
#include "common/reference.h"
#include "runtime/autograd/node.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

using testing::compare_float32_with_float64;
using testing::gradcheck;
using testing::noncontiguous_copy;
using testing::random_input;

Conv2dParams conv_params(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1,
                         int64_t groups = 1) {
  return Conv2dParams{sh, sw, ph, pw, dh, dw, groups};
}

// y[n, k, oh, ow] = b[k] + Σ x[n, g·Cg + c, oh·s − p + kh·d, ow·s − p + kw·d] · w[k, c, kh, kw]
std::vector<double> direct_conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                                  const Shape& y_shape) {
  const std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(w.size(0), 0.0);
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3), K = w.size(0), Cg = w.size(1);
  const int64_t KH = w.size(2), KW = w.size(3), OH = y_shape[2], OW = y_shape[3], Kg = K / p.groups;
  std::vector<double> y(numel_of(y_shape));
  for (int64_t n = 0; n < x.size(0); ++n)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double sum = bv[k];
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * p.stride_h - p.pad_h + kh * p.dilation_h;
                const int64_t iw = ow * p.stride_w - p.pad_w + kw * p.dilation_w;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                sum += xv[((n * C + k / Kg * Cg + c) * H + ih) * W + iw] * wv[((k * Cg + c) * KH + kh) * KW + kw];
              }
          y[((n * K + k) * OH + oh) * OW + ow] = sum;
        }
  return y;
}

class Conv2dTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{11};
  Tensor in(const Shape& s) { return random_input(s, gen, cpu); }
};

struct GradCase {
  const char* name;
  Shape x, w;
  bool bias;
  Conv2dParams p;
};

TEST_F(Conv2dTest, Gradients) {
  const GradCase cases[] = {
      {"3x3 pad 1, bias", {2, 3, 5, 4}, {4, 3, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {"stride 2, dilation 2", {2, 3, 9, 8}, {4, 3, 3, 3}, false, conv_params(2, 2, 0, 0, 2, 2)},
      // Stride 1, output as wide as the input: im2col moves whole shifted planes.
      {"dilation 2, padding 2 (same size)", {2, 2, 6, 5}, {3, 2, 3, 3}, true, conv_params(1, 1, 2, 2, 2, 2)},
      {"1x3 kernel, padding 0x1", {2, 2, 4, 5}, {3, 2, 1, 3}, false, conv_params(1, 1, 0, 1)},
      {"5x3 kernel, padding 1x1 (fewer rows)", {2, 2, 6, 4}, {3, 2, 5, 3}, true, conv_params(1, 1, 1, 1)},
      {"groups 2, 3x2 kernel, stride 2x1, pad 1x0", {2, 4, 7, 6}, {6, 2, 3, 2}, true, conv_params(2, 1, 1, 0, 1, 1, 2)},
      {"1x1 (input is the column matrix)", {2, 3, 4, 5}, {5, 3, 1, 1}, true, conv_params(1, 1, 0, 0)},
      {"1x1 stride 2", {2, 3, 5, 5}, {4, 3, 1, 1}, false, conv_params(2, 2, 0, 0)},
      // Five small images: chunks of three and two images per GEMM, groups inside a chunk.
      {"chunked, groups 2", {5, 4, 3, 3}, {4, 2, 3, 3}, true, conv_params(1, 1, 1, 1, 1, 1, 2)},
      {"chunked 1x1", {5, 3, 2, 2}, {4, 3, 1, 1}, true, conv_params(1, 1, 0, 0)},
      // Taps that only ever read padding are cropped from the kernel before the GEMM.
      {"one 1x1 image, 3x3 pad 1: centre tap only", {1, 2, 1, 1}, {3, 2, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {"chunked 1x1 images, 3x3 pad 1", {5, 3, 1, 1}, {4, 3, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {"2x2 images, stride 2 pad 1: 2x2 live taps", {3, 4, 2, 2}, {5, 4, 3, 3}, false, conv_params(2, 2, 1, 1)},
      {"dilation 2 pad 1 on 3x3: centre tap, negative padding", {2, 2, 3, 3}, {3, 2, 3, 3}, true,
       conv_params(1, 1, 1, 1, 2, 2)},
      // Weight gradient tap by tap (NOTE [ Weight gradient tap by tap ]): at most half the
      // (tap, output) pairs live, each live tap its own GEMM, taps spread over the threads.
      {"2x2 images, 3x3 pad 1: 16 of 36 pairs live", {3, 4, 2, 2}, {5, 4, 3, 3}, true, conv_params(1, 1, 1, 1)},
      {"3x3 images, 5x5 pad 2: 81 of 225 pairs live", {2, 3, 3, 3}, {4, 3, 5, 5}, true, conv_params(1, 1, 2, 2)},
      {"3x4 images, 3x3 stride 2 pad 1, 2x2 output", {2, 3, 3, 4}, {2, 3, 3, 3}, false, conv_params(2, 2, 1, 1)},
  };
  for (const GradCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dParams p = c.p;
    auto fn = [p](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], p); };
    EXPECT_GRADCHECK(gradcheck(fn, {in(c.x), in(c.w), c.bias ? in({c.w[0]}) : Tensor()}));
  }
}

TEST_F(Conv2dTest, GradientsOfANoncontiguousInput) {
  auto fn = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1, 1, 1)); };
  EXPECT_GRADCHECK(gradcheck(fn, {noncontiguous_copy(in({2, 3, 4, 4})), in({2, 3, 3, 3}), in({2})}));
}

TEST_F(Conv2dTest, BiasGradientWithoutWeightGradient) {
  auto fn = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(2, 1, 1, 1)); };
  EXPECT_GRADCHECK(gradcheck(fn, {in({2, 3, 5, 4}).detach(), in({4, 3, 3, 3}).detach(), in({4})}));
}

TEST_F(Conv2dTest, SkipsTheInputGradientOfData) {
  Tensor x = randn({2, 1, 6, 6}, gen, kFloat64, cpu);  // data: no gradient
  Tensor w = in({3, 1, 3, 3});
  Tensor y = conv2d(x, w, Tensor(), conv_params(1, 1, 1, 1));
  ASSERT_TRUE(y.grad_fn());
  EXPECT_FALSE(y.grad_fn()->needs_input_grad(0));
  EXPECT_TRUE(y.grad_fn()->needs_input_grad(1));
  y.backward(ones_like(y));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(w.grad().defined());
}

TEST_F(Conv2dTest, MatchesADirectSumAtEveryBatchSize) {
  // Batch sizes around the chunk sizes: one chunk (BLAS threads the GEMM), uneven last chunk,
  // many chunks per thread; spatial sizes from 1×1 (widest chunks) to 9×9 (one image a chunk).
  struct Case { Shape x, w; Conv2dParams p; };
  const Case cases[] = {
      {{1, 8, 1, 1}, {6, 8, 3, 3}, conv_params(1, 1, 1, 1)},
      {{7, 8, 1, 1}, {6, 8, 3, 3}, conv_params(1, 1, 1, 1)},
      {{33, 4, 2, 2}, {6, 2, 3, 3}, conv_params(1, 1, 1, 1, 1, 1, 2)},
      {{9, 6, 4, 4}, {5, 6, 1, 1}, conv_params(2, 2, 0, 0)},
      {{12, 3, 9, 9}, {4, 3, 3, 3}, conv_params(1, 1, 1, 1)},
      {{3, 2, 20, 20}, {3, 2, 1, 1}, conv_params(1, 1, 0, 0)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    Tensor x = in(c.x).detach(), w = in(c.w).detach(), b = in({c.w[0]}).detach();
    Tensor y = conv2d(x, w, b, c.p);
    EXPECT_TENSOR_NEAR("y", y, from_vector<double>(direct_conv2d(x, w, b, c.p, y.shape()), y.shape(), cpu), 1e-12);
  }
}

TEST_F(Conv2dTest, Float32MatchesFloat64OnALargeBatch) {
  // Enough images for both threads: exercises the per-thread partial weight gradients.
  auto fn = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1, 1, 1)); };
  EXPECT_TRUE(compare_float32_with_float64(fn, {in({16, 8, 12, 12}), in({16, 8, 3, 3}), in({16})}, 2e-4).empty());
  auto small = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), conv_params(2, 2, 1, 1)); };
  EXPECT_TRUE(compare_float32_with_float64(small, {in({32, 16, 4, 4}), in({24, 16, 3, 3})}, 2e-4).empty());
  // ResNet's layer3 and layer4 geometry on 32×32 images, narrowed: weight gradient tap by tap.
  auto layer3 = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v[2], conv_params(1, 1, 1, 1)); };
  EXPECT_TRUE(compare_float32_with_float64(layer3, {in({32, 24, 2, 2}), in({20, 24, 3, 3}), in({20})}, 2e-4).empty());
  auto layer4 = [](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), conv_params(1, 1, 1, 1)); };
  EXPECT_TRUE(compare_float32_with_float64(layer4, {in({32, 24, 1, 1}), in({20, 24, 3, 3})}, 2e-4).empty());
}

TEST_F(Conv2dTest, EmptyBatch) {
  Tensor x = zeros({0, 3, 5, 5}, kFloat64, cpu).set_requires_grad(true);
  Tensor w = in({4, 3, 3, 3}), b = in({4});
  Tensor y = conv2d(x, w, b, conv_params(1, 1, 1, 1));
  EXPECT_EQ(y.shape(), (Shape{0, 4, 5, 5}));
  y.backward(zeros_like(y));
  EXPECT_TENSOR_NEAR("grad_weight", w.grad(), zeros_like(w), 0.0);
  EXPECT_TENSOR_NEAR("grad_bias", b.grad(), zeros_like(b), 0.0);
}

TEST_F(Conv2dTest, MatchesPyTorch) {
  for (const char* name : {"conv2d_basic", "conv2d_stride2_dilation2", "conv2d_groups2", "conv2d_1x1",
                           "conv2d_basic_f32", "conv2d_stride2_dilation2_f32", "conv2d_groups2_f32", "conv2d_1x1_f32"}) {
    SCOPED_TRACE(name);
    const testing::Fixture f(name);
    const double tol = std::string(name).ends_with("_f32") ? 1e-4 : 1e-10;
    auto [sh, sw] = f.option_pair("stride");
    auto [ph, pw] = f.option_pair("padding");
    auto [dh, dw] = f.option_pair("dilation");
    const Conv2dParams p = conv_params(sh, sw, ph, pw, dh, dw, std::stoll(f.option("groups")));
    const bool has_bias = f.option("bias") == "true";
    Tensor x = f.tensor("x", cpu).set_requires_grad(true);
    Tensor w = f.tensor("weight", cpu).set_requires_grad(true);
    Tensor b = has_bias ? f.tensor("bias", cpu).set_requires_grad(true) : Tensor();
    Tensor y = conv2d(x, w, b, p);
    EXPECT_TENSOR_NEAR("out", y, f.tensor("out", cpu), tol);
    y.backward(f.tensor("grad_out", cpu));
    EXPECT_TENSOR_NEAR("grad_x", x.grad(), f.tensor("grad_x", cpu), tol);
    EXPECT_TENSOR_NEAR("grad_weight", w.grad(), f.tensor("grad_weight", cpu), tol);
    if (has_bias) EXPECT_TENSOR_NEAR("grad_bias", b.grad(), f.tensor("grad_bias", cpu), tol);
  }
}

TEST_F(Conv2dTest, ClearErrors) {
  auto z = [&](const Shape& s) { return zeros(s, kFloat32, cpu); };
  Tensor x = z({2, 3, 5, 5});
  EXPECT_ERROR_CONTAINS(conv2d(z({3, 5, 5}), z({4, 3, 3, 3}), Tensor(), {}), "conv2d: expected a 4-D input");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 3, 3}), Tensor(), {}), "conv2d: expected a 4-D weight");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 2, 3, 3}), Tensor(), {}), "expects 2 input channels, got input float32[2, 3, 5, 5]");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 3, 7, 7}), Tensor(), {}), "is too small for kernel");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 3, 3, 3}), z({5}), {}), "does not match 4 output channels");
  EXPECT_ERROR_CONTAINS(conv2d(x, zeros({4, 3, 3, 3}, kFloat64, cpu), Tensor(), {}), "different dtypes");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 1, 3, 3}), Tensor(), conv_params(1, 1, 0, 0, 1, 1, 2)), "divisible by groups");
  EXPECT_ERROR_CONTAINS(conv2d(z({2, 4, 5, 5}), z({4, 4, 3, 3}), Tensor(), conv_params(1, 1, 0, 0, 1, 1, 2)),
                        "with groups 2 expects 8 input channels");
  EXPECT_ERROR_CONTAINS(conv2d(x, z({4, 3, 3, 3}), Tensor(), conv_params(0, 1, 0, 0)), "invalid parameters");
}

}  // namespace
}  // namespace dp
