// Rank-ordered sums (NOTE [ Rank-ordered sums ] in comm/mpi/mpi_process_group.h), the deterministic
// mode's all-reduce and reduce-scatter, under mpirun with 1, 2 and 4 ranks.
//
// Every rank knows every rank's values (a hash of rank and index with magnitudes from 1e-4 to 1e8,
// so that the order of additions changes the float result), computes ((x0 + x1) + x2) + ... itself
// and expects exactly those bits, on every rank, for lengths that the group size does not divide.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/mpi/mpi_process_group.h"
#include "mpi_test_environment.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

template <typename T>
T value_of(int rank, int64_t i) {
  uint64_t h = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(i) + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const double mantissa = 1.0 + static_cast<double>(h & 0xFFFFF) / 0x100000;  // [1, 2)
  const int exponent = static_cast<int>((h >> 20) % 13) - 4;                  // 1e-4 .. 1e8
  const double sign = (h >> 40) & 1 ? -1.0 : 1.0;
  return static_cast<T>(sign * mantissa * std::pow(10.0, exponent));
}

class RankOrderedSumsTest : public ::testing::Test {
 protected:
  RankOrderedSumsTest() {
    MpiProcessGroupOptions options;
    options.rank_ordered_sums = true;
    group_ = std::make_unique<MpiProcessGroup>(testing::test_mpi(), options);
  }
  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }

  template <typename T>
  std::vector<T> values(int rank, int64_t n, int64_t offset = 0) const {
    std::vector<T> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value_of<T>(rank, offset + i);
    return v;
  }
  // Elements [0, n) summed over ranks 0, 1, ... in that order. The values are stored first: an
  // inlined value_of(r, i) * ... + acc could be contracted into an FMA and round differently.
  template <typename T>
  std::vector<T> ordered_sums(int64_t n) const {
    std::vector<T> acc = values<T>(0, n);
    for (int r = 1; r < size(); ++r) {
      const std::vector<T> x = values<T>(r, n);
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = x[i] + acc[i];
    }
    return acc;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;
};

TEST_F(RankOrderedSumsTest, AllReduceAddsInRankOrderOnEveryRank) {
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1001}, int64_t{65537}}) {
    Tensor f32 = from_vector<float>(values<float>(rank(), n), {n}, cpu_);
    Tensor f64 = from_vector<double>(values<double>(rank(), n), {n}, cpu_);
    Tensor avg = from_vector<float>(values<float>(rank(), n), {n}, cpu_);
    WorkPtr a = group_->all_reduce(f32, CollectiveReduce::Sum);
    WorkPtr b = group_->all_reduce(f64, CollectiveReduce::Sum);
    WorkPtr c = group_->all_reduce(avg, CollectiveReduce::Average);
    a->wait();
    b->wait();
    c->wait();
    const std::vector<float> got32 = f32.to_vector<float>(), got_avg = avg.to_vector<float>();
    const std::vector<double> got64 = f64.to_vector<double>();
    const std::vector<float> sums32 = ordered_sums<float>(n);
    const std::vector<double> sums64 = ordered_sums<double>(n);
    int64_t wrong32 = 0, wrong64 = 0, wrong_avg = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float s32 = sums32[static_cast<size_t>(i)];
      wrong32 += got32[static_cast<size_t>(i)] != s32;
      wrong64 += got64[static_cast<size_t>(i)] != sums64[static_cast<size_t>(i)];
      wrong_avg += got_avg[static_cast<size_t>(i)] != s32 / static_cast<float>(size());
    }
    EXPECT_EQ(wrong32, 0) << "float32 sums, n = " << n << " on rank " << rank() << " of " << size();
    EXPECT_EQ(wrong64, 0) << "float64 sums, n = " << n << " on rank " << rank() << " of " << size();
    EXPECT_EQ(wrong_avg, 0) << "float32 averages, n = " << n << " on rank " << rank() << " of " << size();
  }
}

TEST_F(RankOrderedSumsTest, ReduceScatterAddsInRankOrder) {
  const int64_t m = 777;
  Tensor input = from_vector<float>(values<float>(rank(), m * size()), {m * size()}, cpu_);
  Tensor out = empty({m}, kFloat32, cpu_);
  group_->reduce_scatter(input, out, CollectiveReduce::Sum)->wait();
  const std::vector<float> got = out.to_vector<float>(), sums = ordered_sums<float>(m * size());
  int64_t wrong = 0;
  for (int64_t i = 0; i < m; ++i) wrong += got[static_cast<size_t>(i)] != sums[static_cast<size_t>(rank() * m + i)];
  EXPECT_EQ(wrong, 0);
}

TEST_F(RankOrderedSumsTest, SixteenBitAndIntegerSumsAreExact) {
  // Small integers are exact in every dtype: the ordered path must give the plain sum.
  const int64_t n = 129;
  std::vector<float> v(static_cast<size_t>(n));
  std::vector<int64_t> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(w[static_cast<size_t>(i)] = (rank() + 1) * (i % 7));
  Tensor half = from_vector<float>(v, {n}, cpu_).to(kFloat16), bf = from_vector<float>(v, {n}, cpu_).to(kBFloat16);
  Tensor ints = from_vector<int64_t>(w, {n}, cpu_);
  WorkPtr a = group_->all_reduce(half, CollectiveReduce::Sum);
  WorkPtr b = group_->all_reduce(bf, CollectiveReduce::Sum);
  WorkPtr c = group_->all_reduce(ints, CollectiveReduce::Sum);
  a->wait();
  b->wait();
  c->wait();
  const double ranks = size() * (size() + 1) / 2.0;
  const std::vector<float> h = half.to(kFloat32).to_vector<float>(), g = bf.to(kFloat32).to_vector<float>();
  const std::vector<int64_t> k = ints.to_vector<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const double expected = ranks * static_cast<double>(i % 7);
    EXPECT_EQ(h[static_cast<size_t>(i)], expected) << i;
    EXPECT_EQ(g[static_cast<size_t>(i)], expected) << i;
    EXPECT_EQ(k[static_cast<size_t>(i)], static_cast<int64_t>(expected)) << i;
  }
}

}  // namespace
}  // namespace dp
