#include <gtest/gtest.h>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"
#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

#include <cmath>

namespace dp {
namespace {

class TensorTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
};

TEST_F(TensorTest, EmptyHasContiguousStrides) {
  Tensor t = empty({2, 3, 4}, kFloat32, cpu);
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.str(), "float32[2, 3, 4] on cpu");
}

TEST_F(TensorTest, ViewsShareStorage) {
  Tensor t = arange(0, 12, 1, kFloat32, cpu);
  Tensor v = t.view({3, 4});
  EXPECT_EQ(v.storage(), t.storage());
  Tensor tr = v.t();
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.shape(), (Shape{4, 3}));
  EXPECT_EQ(tr.to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor c = tr.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  Tensor n = v.narrow(1, 1, 2);
  EXPECT_EQ(n.to_vector<float>(), (std::vector<float>{1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(v.select(0, 2).to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  Tensor p = arange(0, 24, 1, kFloat32, cpu).view({2, 3, 4}).permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.contiguous().to_vector<float>()[1], 4.0f);
}

TEST_F(TensorTest, ViewRejectsIncompatibleStridesReshapeCopies) {
  Tensor t = arange(0, 6, 1, kFloat32, cpu).view({2, 3}).t();
  EXPECT_THROW(t.view({6}), Error);
  Tensor r = t.reshape({6});
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t.reshape({-1, 2}).shape(), (Shape{3, 2}));
  EXPECT_THROW(t.reshape({4, -1}), Error);
}

TEST_F(TensorTest, ExpandBroadcastsWithZeroStride) {
  Tensor t = from_vector<float>({1, 2, 3}, {3, 1}, cpu);
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.contiguous().to_vector<float>()[4], 2.0f);
  EXPECT_THROW(t.expand({2, 2}), Error);
}

TEST_F(TensorTest, UnsqueezeSqueezeFlatten) {
  Tensor t = zeros({2, 3}, kFloat32, cpu);
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(t.unsqueeze(-1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(t.unsqueeze(1).squeeze(1).shape(), (Shape{2, 3}));
  EXPECT_EQ(zeros({2, 3, 4, 5}, kFloat32, cpu).flatten(1).shape(), (Shape{2, 60}));
}

TEST_F(TensorTest, CastsBetweenAllDtypes) {
  Tensor t = from_vector<float>({-1.5f, 0.0f, 2.25f, 300.0f}, {4}, cpu);
  for (DType d : {kFloat64, kFloat16, kBFloat16, kInt32, kInt64}) {
    std::vector<float> back = t.to(d).to(kFloat32).to_vector<float>();
    EXPECT_EQ(back[2], d == kInt32 || d == kInt64 ? 2.0f : 2.25f) << dtype_name(d);
    EXPECT_EQ(back[3], 300.0f) << dtype_name(d);
  }
  EXPECT_EQ(t.to(kBool).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(t.to(kUInt8).to_vector<uint8_t>()[2], 2);
  // bfloat16 keeps 8 bits of mantissa: 1/3 rounds
  Tensor third = full({1}, 1.0 / 3.0, kBFloat16, cpu);
  EXPECT_NEAR(third.item<float>(), 0.333984375f, 1e-9);
}

TEST_F(TensorTest, RandomIsSeededAndDeviceIndependentOfThreads) {
  Generator g1(7), g2(7);
  Tensor a = randn({1000}, g1, kFloat32, cpu);
  CpuBackend one_thread(1);
  Tensor b = randn({1000}, g2, kFloat32, Device(&one_thread));
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(g1.offset(), 1000u);
  Tensor u = rand({100000}, g1, kFloat64, cpu, -2.0, 3.0);
  double m = mean(u).item<double>();
  EXPECT_NEAR(m, 0.5, 0.03);
  EXPECT_GE(amax(u, {0}).item<double>(), 2.99);
  Tensor n = randn({200000}, g1, kFloat64, cpu, 1.0, 2.0);
  EXPECT_NEAR(mean(n).item<double>(), 1.0, 0.02);
  EXPECT_NEAR(mean(square(add(n, -1.0))).item<double>(), 4.0, 0.05);
}

// Element i is made from Philox counter offset + i (the CUDA kernel's rule): the CPU kernel's
// vectorised lanes, split over threads, give what one generate() call per element gives. Sizes
// cross the 16-counter lanes and the thread split unevenly; the offset crosses 2^32.
TEST_F(TensorTest, RandomElementIIsPhiloxCounterOffsetPlusI) {
  const uint64_t seed = 0x1234567890abcdefULL, offset = (uint64_t{1} << 32) - 37;
  for (int64_t n : {int64_t{5}, int64_t{70001}}) {
    Tensor u = empty({n}, kFloat32, cpu), m = empty({n}, kFloat32, cpu), d = empty({n}, kFloat64, cpu);
    Tensor g = empty({n}, kFloat64, cpu);
    backend.random(u, RandomDist::Uniform, -1.0, 2.0, seed, offset);
    backend.random(m, RandomDist::Bernoulli, 0.9, 0.0, seed, offset);
    backend.random(d, RandomDist::Uniform, 0.0, 1.0, seed, offset);
    backend.random(g, RandomDist::Normal, 1.0, 2.0, seed, offset);
    const std::vector<float> uv = u.to_vector<float>(), mv = m.to_vector<float>();
    const std::vector<double> dv = d.to_vector<double>(), gv = g.to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t r[4];
      Philox4x32::generate(seed, offset + static_cast<uint64_t>(i), r);
      const double u24 = static_cast<double>(r[0] >> 8) * 0x1.0p-24;
      const double u53 = static_cast<double>((static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11)) * 0x1.0p-53;
      const double u1 = (static_cast<double>(r[2]) + 1.0) * 0x1.0p-32, u2 = static_cast<double>(r[3]) * 0x1.0p-32;
      ASSERT_EQ(uv[i], static_cast<float>(std::fma(3.0, u24, -1.0))) << i;
      ASSERT_EQ(mv[i], u24 < 0.9 ? 1.0f : 0.0f) << i;
      ASSERT_EQ(dv[i], u53) << i;
      ASSERT_EQ(gv[i], std::fma(2.0 * std::sqrt(-2.0 * std::log(u1)), std::cos(6.283185307179586 * u2), 1.0)) << i;
    }
  }
}

TEST_F(TensorTest, CopyAndFillInPlaceWithBroadcast) {
  Tensor t = zeros({2, 3}, kFloat32, cpu);
  t.copy_(from_vector<double>({1, 2, 3}, {3}, cpu));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  t.t().narrow(0, 1, 1).fill_(9.0);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 9, 3, 1, 9, 3}));
  EXPECT_THROW(t.copy_(zeros({4}, kFloat32, cpu)), Error);
}

TEST_F(TensorTest, ErrorsNameTheOp) {
  Tensor a = zeros({2, 3}, kFloat32, cpu), b = zeros({4, 3}, kFloat32, cpu);
  try {
    add(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4, 3] cannot be broadcast"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(a.item<float>(), Error);
  EXPECT_THROW(Tensor().shape(), Error);
}

TEST_F(TensorTest, ReductionsOverDims) {
  Tensor t = arange(0, 24, 1, kFloat64, cpu).view({2, 3, 4});
  EXPECT_EQ(sum(t).item<double>(), 276.0);
  EXPECT_EQ(sum(t, {1}).to_vector<double>(),
            (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(sum(t, {0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_EQ(sum(t, {0, 2}).to_vector<double>(), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(mean(t, {-1}).to_vector<double>()[0], 1.5);
  EXPECT_EQ(amax(t, {1}).to_vector<double>()[0], 8.0);
  EXPECT_EQ(sum(t.permute({2, 0, 1}), {1}).to_vector<double>()[0], 12.0);
  // Large enough to take the parallel path with a reduced leading dim.
  Tensor big = ones({300, 200}, kFloat32, cpu);
  EXPECT_EQ(sum(big, {0}).to_vector<float>()[5], 300.0f);
  EXPECT_EQ(sum(big, {1}).to_vector<float>()[7], 200.0f);
  EXPECT_EQ(argmax(from_vector<float>({1, 5, 2, 7, 0, 7}, {2, 3}, cpu), -1).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 0}));
}

}  // namespace
}  // namespace dp

namespace dp {
namespace {

TEST(CpuAllocator, ReusesFreedBlocksOfTheSameSize) {
  CpuBackend backend(1);
  Device cpu(&backend);
  void* first;
  {
    Tensor t = empty({1000, 1000}, kFloat32, cpu);
    first = t.raw_data();
  }
  EXPECT_GE(backend.cached_bytes(), 4000000u);
  Tensor again = empty({1000, 1000}, kFloat32, cpu);
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(backend.cached_bytes(), 0u);
  Tensor other = empty({10}, kFloat32, cpu);
  EXPECT_NE(other.raw_data(), first);
  other = Tensor();
  backend.release_cached();
  EXPECT_EQ(backend.cached_bytes(), 0u);
}

}  // namespace
}  // namespace dp
