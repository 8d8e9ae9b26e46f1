// The CPU's native bfloat16 paths: vectorised float16/bfloat16 conversions (bit-identical to
// Eigen's scalar ones), oneDNN bfloat16 GEMM and the bfloat16 convolution built on it, each
// against the float32 kernels run on the same (exactly widened) values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

template <typename H>
uint16_t bits_of(H h) {
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

// Floats that probe the rounding: ties to even either way, just above/below ties, the largest
// finite values (round to inf), subnormals, signed zeros, infinities, NaNs of both signs, and
// random bit patterns. Lengths not multiples of 16 cover the scalar tails.
std::vector<float> rounding_probes() {
  std::vector<float> v;
  auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  };
  for (uint32_t b : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                     0x00000001u, 0x80000001u, 0x00400000u, 0x00008000u, 0x00000000u, 0x80000000u, 0x7f800000u,
                     0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x477ff000u, 0x477fefffu,
                     0x33800000u, 0x38800000u, 0x387fc000u})
    v.push_back(from_bits(b));
  std::mt19937 rng(7);
  for (int i = 0; i < 4000; ++i) v.push_back(from_bits(static_cast<uint32_t>(rng())));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 1003; ++i) v.push_back(normal(rng));
  return v;
}

TEST(CpuHalfConversions, WidenEveryValueExactly) {
  std::vector<Eigen::bfloat16> b(65536);
  std::vector<Eigen::half> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t u = static_cast<uint16_t>(i);
    std::memcpy(static_cast<void*>(&b[i]), &u, 2);  // the raw bits
    std::memcpy(static_cast<void*>(&h[i]), &u, 2);
  }
  std::vector<float> wb(65536), wh(65536);
  cpu::widen(b.data(), wb.data(), 65536);
  cpu::widen(h.data(), wh.data(), 65536);
  for (uint32_t i = 0; i < 65536; ++i) {
    const float eb = static_cast<float>(b[i]), eh = static_cast<float>(h[i]);
    ASSERT_EQ(std::memcmp(&wb[i], &eb, 4), 0) << "bfloat16 bits " << i;
    if (std::isnan(eh)) {  // F16C keeps a float16 NaN's payload (and quiets it); Eigen need not
      ASSERT_TRUE(std::isnan(wh[i])) << "float16 bits " << i;
      continue;
    }
    ASSERT_EQ(std::memcmp(&wh[i], &eh, 4), 0) << "float16 bits " << i;
  }
}

TEST(CpuHalfConversions, NarrowRoundsAsEigenBitForBit) {
  const std::vector<float> v = rounding_probes();
  for (int64_t offset : {0, 5}) {  // an unaligned start too
    const int64_t n = static_cast<int64_t>(v.size()) - offset;
    std::vector<Eigen::bfloat16> b(n);
    std::vector<Eigen::half> h(n);
    cpu::narrow(v.data() + offset, b.data(), n);
    cpu::narrow(v.data() + offset, h.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float f = v[offset + i];
      ASSERT_EQ(bits_of(b[i]), bits_of(Eigen::bfloat16(f))) << "bfloat16 of " << f << " (index " << i << ")";
      if (std::isnan(f)) {  // as above: any float16 NaN
        ASSERT_TRUE(Eigen::numext::isnan(h[i])) << "float16 of NaN (index " << i << ")";
        continue;
      }
      ASSERT_EQ(bits_of(h[i]), bits_of(Eigen::half(f))) << "float16 of " << f << " (index " << i << ")";
    }
  }
}

// |got − want| within a bfloat16 rounding or two of the float32 result, relative to the value
// and, for sums that cancel, to the output's typical size.
void expect_close_bf16(const Tensor& got, const Tensor& want_f32, const std::string& what) {
  ASSERT_EQ(got.dtype(), kBFloat16);
  const std::vector<float> g = got.to(kFloat32).to_vector<float>(), w = want_f32.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  double sq = 0;
  for (float x : w) sq += double(x) * x;
  const double rms = w.empty() ? 0.0 : std::sqrt(sq / static_cast<double>(w.size()));
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], std::ldexp(std::abs(w[i]), -7) + 1e-3 * rms + 1e-30) << what << ", element " << i;
}

// The bfloat16 tensor's values, exactly, in float32.
Tensor widened(const Tensor& t) { return t.defined() ? t.to(kFloat32) : t; }

class CpuBfloat16Test : public ::testing::TestWithParam<int> {  // parameter: threads
 protected:
  void SetUp() override {
    if (!cpu::bf16_gemm_available()) {
      // The float32 conversion path then serves bfloat16 (tested by the op harness); not having
      // the native path on a CPU with AVX-512 BF16 would be a defect.
      ASSERT_FALSE(__builtin_cpu_supports("avx512bf16")) << "AVX-512 BF16 present, oneDNN bfloat16 matmul not";
      GTEST_SKIP() << "this CPU has no AVX-512 BF16: bfloat16 runs through float32";
    }
  }
  CpuBackend backend{GetParam()};
  Device cpu{&backend};
  Generator gen{5};
  Tensor bf16(const Shape& s) { return rand(s, gen, kFloat32, cpu, -1, 1).to(kBFloat16); }
};

TEST_P(CpuBfloat16Test, GemmMatchesFloat32ForEveryLayoutAlphaBetaAndBatch) {
  const int64_t M = 37, K = 301, N = 45;
  Tensor a = bf16({M, K}), b = bf16({K, N});
  Tensor at = a.t().contiguous().t(), bt = b.t().contiguous().t();  // transposed storage
  for (auto [x, y] : {std::pair{a, b}, std::pair{at, b}, std::pair{a, bt}, std::pair{at, bt}}) {
    for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}, std::pair{-2.0, 0.25}}) {
      Tensor c0 = bf16({M, N});
      Tensor c = c0.clone(), ref = widened(c0);
      backend.gemm(x, y, c, alpha, beta);
      backend.gemm(widened(x), widened(y), ref, alpha, beta);
      expect_close_bf16(c, ref, "alpha " + std::to_string(alpha) + " beta " + std::to_string(beta));
    }
  }
  // Batched: one product per thread (many small ones) and one at a time, and a broadcast operand.
  for (int64_t batch : {2, 9}) {
    Tensor a3 = bf16({batch, M, K}), b3 = bf16({batch, K, N});
    Tensor b_shared = b.unsqueeze(0).expand({batch, K, N});
    for (const Tensor& rhs : {b3, b_shared}) {
      Tensor c = empty({batch, M, N}, kBFloat16, cpu), ref = empty({batch, M, N}, kFloat32, cpu);
      backend.gemm(a3, rhs, c, 1.0, 0.0);
      backend.gemm(widened(a3), widened(rhs), ref, 1.0, 0.0);
      expect_close_bf16(c, ref, "batch " + std::to_string(batch));
    }
  }
}

struct ConvCase {
  const char* name;
  Shape x, w;
  bool bias;
  Conv2dParams p;
};

TEST_P(CpuBfloat16Test, ConvolutionForwardAndBackwardMatchFloat32) {
  const ConvCase cases[] = {
      {"3x3 same, several chunks", {5, 3, 9, 9}, {4, 3, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}},
      {"groups, stride 2", {6, 4, 7, 7}, {6, 2, 3, 3}, true, {2, 2, 1, 1, 1, 1, 2}},
      {"3x3 on 1x1 maps (cropped taps)", {3, 8, 1, 1}, {5, 8, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}},
      {"1x1 direct", {4, 8, 5, 5}, {6, 8, 1, 1}, false, {1, 1, 0, 0, 1, 1, 1}},
      {"one image", {1, 3, 6, 6}, {2, 3, 3, 3}, true, {1, 1, 0, 0, 1, 1, 1}},
      {"SmallCNN's second conv", {32, 32, 14, 14}, {64, 32, 3, 3}, true, {1, 1, 1, 1, 1, 1, 1}},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dParams& p = c.p;
    Tensor x = bf16(c.x), w = bf16(c.w), b = c.bias ? bf16({c.w[0]}) : Tensor();
    const int64_t OH = (c.x[2] + 2 * p.pad_h - c.w[2]) / p.stride_h + 1, OW = (c.x[3] + 2 * p.pad_w - c.w[3]) / p.stride_w + 1;
    const Shape y_shape{c.x[0], c.w[0], OH, OW};
    Tensor y = empty(y_shape, kBFloat16, cpu), y_ref = empty(y_shape, kFloat32, cpu);
    backend.conv2d_forward(x, w, b, y, p);
    backend.conv2d_forward(widened(x), widened(w), widened(b), y_ref, p);
    expect_close_bf16(y, y_ref, "forward");

    Tensor dy = bf16(y_shape);
    Tensor dx = full(c.x, 7.0, kBFloat16, cpu), dx_ref = empty(c.x, kFloat32, cpu);  // overwritten
    backend.conv2d_backward_input(dy, w, dx, p, false);
    backend.conv2d_backward_input(widened(dy), widened(w), dx_ref, p, false);
    expect_close_bf16(dx, dx_ref, "input gradient");

    Tensor dw = full(c.w, 7.0, kBFloat16, cpu), dw_ref = empty(c.w, kFloat32, cpu);
    Tensor db = c.bias ? full({c.w[0]}, 7.0, kBFloat16, cpu) : Tensor();
    Tensor db_ref = c.bias ? empty({c.w[0]}, kFloat32, cpu) : Tensor();
    backend.conv2d_backward_weight(dy, x, dw, db, p);
    backend.conv2d_backward_weight(widened(dy), widened(x), dw_ref, db_ref, p);
    expect_close_bf16(dw, dw_ref, "weight gradient");
    if (c.bias) expect_close_bf16(db, db_ref, "bias gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuBfloat16Test, ::testing::Values(1, 2),
                         [](const auto& info) { return std::to_string(info.param) + "_threads"; });

}  // namespace
}  // namespace dp
