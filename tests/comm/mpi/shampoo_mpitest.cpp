// Shampoo's distributed root computation across real ranks (mpirun with 1, 2 and 4 ranks).
//
// One global problem whatever the number of ranks: the gradient of each step is the mean of four
// shard gradients; rank r computes the shards s ≡ r (mod ranks) and the ranks all-reduce their sum.
// Every rank also runs the single-process Shampoo on the whole mean gradient (no process group: it
// computes every root itself) and compares its parameters with it after 30 steps. With more than
// one rank, each rank must compute only part of the roots (longest-processing-time first) and spend
// less CPU time on them than the single-process run does; rank 0 prints the per-rank figures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "comm/mpi/mpi_process_group.h"
#include "mpi_test_environment.h"
#include "optim/shampoo.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

constexpr int kShards = 4;

// Rounded to multiples of 2^-24, so that sums of four shards are exact in any order: the global
// gradient is then bit-identical however the ranks' all_reduce adds it up, and the comparison
// isolates the root distribution. (With ε = 1e-12, Shampoo amplifies rounding differences in the
// gradient: the [80] vector's factor has rank ≤ t < 80, and its null space is scaled by ε^(−1/2) =
// 1e6. Unrounded shards summed in a different order end 1e-4 apart after 30 steps; with ε = 1e-6,
// 1e-10.)
std::vector<double> shard_grad(const std::vector<double>& w, int step, int shard, size_t which) {
  std::vector<double> g(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    const double x = std::cos((1 + 0.05 * step) * w[i] + 0.3 * shard) +
                     0.5 * std::sin(0.37 * static_cast<double>((i + 1) * (step + 1) + 7 * which + shard));
    g[i] = std::ldexp(std::nearbyint(std::ldexp(x, 24)), -24);
  }
  return g;
}

class ShampooMpiTest : public ::testing::Test {
 protected:
  ShampooMpiTest() : group_(std::make_unique<MpiProcessGroup>(testing::test_mpi())) {}

  // Shapes chosen so that blocks differ in cost: with max_preconditioner_dim 96, [384, 288] is
  // twelve 96×96 blocks, [200, 50] three (96×50, 96×50, 8×50), [64, 3, 3, 3] one 64×27, [80] a
  // full vector and [500] a diagonal one: 18 blocks.
  std::vector<Tensor> make_params(uint64_t seed) {
    Generator gen(seed);
    std::vector<Tensor> ps;
    for (const Shape& s : std::vector<Shape>{{384, 288}, {200, 50}, {64, 3, 3, 3}, {80}, {500}})
      ps.push_back(randn(s, gen, kFloat64, cpu_, 0.0, 0.5).set_requires_grad(true));
    return ps;
  }

  // `steps` steps of one global problem: the distributed optimiser from this rank's shards summed
  // over the ranks, the single-process one from all shards.
  void train(std::vector<Tensor>& dist, std::vector<Tensor>& single, Shampoo& distributed, Shampoo& reference,
             int steps) {
    const int rank = group_->rank(), size = group_->size();
    for (int step = 0; step < steps; ++step) {
      for (size_t k = 0; k < dist.size(); ++k) {
        // Distributed: this rank's shards, summed over ranks, divided by the shard count.
        const std::vector<double> w = dist[k].to_vector<double>();
        std::vector<double> local(w.size(), 0.0);
        for (int s = rank; s < kShards; s += size) {
          const std::vector<double> g = shard_grad(w, step, s, k);
          for (size_t i = 0; i < g.size(); ++i) local[i] += g[i];
        }
        Tensor grad = from_vector<double>(local, dist[k].shape(), cpu_);
        group_->all_reduce(grad, CollectiveReduce::Sum)->wait();
        std::vector<double> mean = grad.to_vector<double>();
        for (double& x : mean) x /= kShards;
        dist[k].set_grad(from_vector<double>(mean, dist[k].shape(), cpu_));
        // Single process: the whole mean gradient.
        const std::vector<double> ws = single[k].to_vector<double>();
        std::vector<double> total(ws.size(), 0.0);
        for (int s = 0; s < kShards; ++s) {
          const std::vector<double> g = shard_grad(ws, step, s, k);
          for (size_t i = 0; i < g.size(); ++i) total[i] += g[i];
        }
        for (double& x : total) x /= kShards;
        single[k].set_grad(from_vector<double>(total, single[k].shape(), cpu_));
      }
      distributed.step();
      reference.step();
      distributed.zero_grad();
      reference.zero_grad();
    }
  }

  // max over the parameters of max |a − b| / max |b|.
  static double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    double worst = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      const std::vector<double> x = a[k].to_vector<double>(), y = b[k].to_vector<double>();
      double diff = 0, scale = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        diff = std::max(diff, std::abs(x[i] - y[i]));
        scale = std::max(scale, std::abs(y[i]));
      }
      worst = std::max(worst, diff / scale);
    }
    return worst;
  }

  Runtime runtime_;
  Device cpu_ = runtime_.cpu();
  std::unique_ptr<MpiProcessGroup> group_;
};

TEST_F(ShampooMpiTest, DistributedRootsMatchOneRankAndSplitTheWork) {
  const int rank = group_->rank(), size = group_->size();
  std::vector<Tensor> dist = make_params(5), single = make_params(5);
  ShampooOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .max_preconditioner_dim = 96,
                   .precondition_frequency = 3, .start_preconditioning_step = 3,
                   .grafting = ShampooGrafting::Adam};
  Shampoo reference(single, o);
  o.process_group = group_.get();
  Shampoo distributed(dist, o);
  ASSERT_EQ(distributed.blocks().size(), 18u);

  train(dist, single, distributed, reference, 30);

  // Same trajectory as one process.
  const double worst = max_relative_difference(dist, single);
  EXPECT_LE(worst, 1e-6);
  EXPECT_EQ(distributed.root_computations(), 10);  // steps 3, 6, ..., 30
  EXPECT_EQ(distributed.root_computations(), reference.root_computations());
  EXPECT_EQ(distributed.root_failures(), reference.root_failures());

  // The assignment: the same on every rank, every block owned once, split by LPT.
  double total_cost = 0, max_cost = 0;
  std::vector<double> owners;
  for (const Shampoo::BlockInfo& b : distributed.blocks()) {
    total_cost += b.cost;
    max_cost = std::max(max_cost, b.cost);
    owners.push_back(b.owner);
  }
  Tensor mine = from_vector<double>(owners, {static_cast<int64_t>(owners.size())}, cpu_);
  Tensor everyone = Tensor::empty({size * static_cast<int64_t>(owners.size())}, kFloat64, cpu_);
  group_->all_gather(mine, everyone)->wait();
  const std::vector<double> all_owners = everyone.to_vector<double>();
  for (int r = 0; r < size; ++r)
    for (size_t b = 0; b < owners.size(); ++b) EXPECT_EQ(all_owners[r * owners.size() + b], owners[b]);
  EXPECT_EQ(reference.local_blocks(), 18u);
  if (size > 1) {
    EXPECT_GE(distributed.local_blocks(), 1u);
    EXPECT_LT(distributed.local_blocks(), 18u);
    EXPECT_LE(distributed.local_cost(), total_cost / size + max_cost);  // LPT's bound
    // Each rank's own root work is a fraction of the single-process run's (thread CPU time, which
    // oversubscribed ranks do not inflate).
    EXPECT_LT(distributed.root_cpu_seconds(), 0.8 * reference.root_cpu_seconds());
  }

  // Per-rank figures, printed by rank 0.
  std::vector<double> figures = {static_cast<double>(distributed.local_blocks()), distributed.local_cost() / total_cost,
                                 distributed.root_seconds(), distributed.root_cpu_seconds(),
                                 distributed.root_comm_seconds(), reference.root_cpu_seconds(), worst};
  const int64_t nf = static_cast<int64_t>(figures.size());
  Tensor f = from_vector<double>(figures, {nf}, cpu_);
  Tensor fs = Tensor::empty({size * nf}, kFloat64, cpu_);
  group_->all_gather(f, fs)->wait();
  if (rank == 0) {
    const std::vector<double> v = fs.to_vector<double>();
    std::printf("[ shampoo  ] %d rank(s), 18 blocks, 10 root steps; single-process roots: %.3f s CPU on rank 0\n", size,
                v[5]);
    for (int r = 0; r < size; ++r) {
      const double* x = v.data() + r * nf;
      std::printf("[ shampoo  ] rank %d: %2.0f blocks, %5.1f%% of the cost, roots %.3f s wall / %.3f s CPU, "
                  "all_gather %.3f s, max relative difference to 1 rank %.2g\n",
                  r, x[0], 100 * x[1], x[2], x[3], x[4], x[6]);
    }
  }
}

// The backend kernels (NOTE [ Shampoo on a device ]: the path a GPU takes, here on the CPU) with
// distributed roots: their staged copies to the host and the gathered roots copied back follow
// the single-process Eigen run. ε = 1e-6 (see shard_grad): the two paths sum the factor products in
// different orders, and ε = 1e-12 would scale that rounding by 1e6 in the factors' null spaces.
TEST_F(ShampooMpiTest, DistributedRootsWithBackendKernelsMatchOneRankWithEigen) {
  std::vector<Tensor> dist = make_params(7), single = make_params(7);
  ShampooOptions o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .epsilon = 1e-6, .max_preconditioner_dim = 96,
                   .precondition_frequency = 3, .start_preconditioning_step = 3,
                   .grafting = ShampooGrafting::Adam};
  Shampoo reference(single, o);
  o.process_group = group_.get();
  o.kernels = ShampooKernels::Backend;
  Shampoo distributed(dist, o);
  ASSERT_TRUE(distributed.uses_backend_kernels());
  train(dist, single, distributed, reference, 12);
  EXPECT_LE(max_relative_difference(dist, single), 1e-8);  // 1.5e-9 measured
  EXPECT_EQ(distributed.root_computations(), 4);  // steps 3, 6, 9, 12
  EXPECT_EQ(distributed.root_failures(), reference.root_failures());
}

}  // namespace
}  // namespace dp
