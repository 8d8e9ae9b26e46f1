// Which samples an epoch visits, in what order (Sampler), and how they group into batches
// (BatchSampler). The DataLoader asks the BatchSampler for an EpochPlan in begin_epoch.
//
// NOTE [ Deterministic epochs ]
// An epoch's order is a pure function of (seed, epoch) and, for the distributed sampler,
// (rank, world_size). It is computed on the caller's thread, so it does not depend on how many
// loader threads run. The shuffle draws from std::mt19937_64 seeded by a hash of (seed, epoch)
// through our own bounded draw (std::uniform_int_distribution differs between standard
// libraries), so the order is also the same on every platform. Every rank of a job computes the
// same permutation and keeps its own shard of it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/data/dataset.h"

namespace dp {

// A uniformly random permutation of [0, n) for (seed, epoch); see NOTE [ Deterministic epochs ].
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices each epoch yields.
  virtual int64_t size() const = 0;
  // The epoch's sample indices, in visiting order.
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

// 0, 1, ..., n-1 every epoch (evaluation); or one rank's contiguous part of them, for an
// evaluation split over ranks that visits every sample exactly once (no padding, unlike
// DistributedSampler: rank r of W takes [r n / W, (r + 1) n / W)).
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t dataset_size);
  SequentialSampler(int64_t dataset_size, int rank, int world_size);
  int64_t size() const override { return end_ - begin_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t begin_, end_;
};

// A new permutation of [0, n) every epoch.
class RandomSampler final : public Sampler {
 public:
  RandomSampler(int64_t dataset_size, uint64_t seed);
  int64_t size() const override { return dataset_size_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t dataset_size_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  uint64_t seed = 0;     // must be the same on every rank
  bool drop_last = false;
};

// PyTorch's DistributedSampler semantics: rank r takes positions r, r + W, r + 2W, ... of the
// epoch's order, so the shards are disjoint and equally long. Without drop_last the order is
// first padded by repeating its head until its length divides by W (up to W - 1 samples are seen
// twice an epoch); with drop_last its tail is cut instead (up to W - 1 samples are skipped).
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options);
  int64_t size() const override { return shard_size_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t shard_size_;
};

// An epoch's sample order cut into batches.
struct EpochPlan {
  std::vector<int64_t> indices;       // sample order
  std::vector<int64_t> batch_starts;  // batch b is indices[batch_starts[b], batch_starts[b + 1])
  // Batches of rows (token batching); all empty for batches of fixed-shape samples.
  std::vector<int64_t> row_starts;        // row k holds indices[row_starts[k], row_starts[k + 1])
  std::vector<int64_t> batch_row_starts;  // batch b holds rows [batch_row_starts[b], batch_row_starts[b + 1])
  std::vector<int64_t> padded_lengths;    // batch b's rows padded to padded_lengths[b] tokens
  std::vector<int64_t> step_targets;      // RowBatch::step_targets of batch b
  // Samples of batch b's whole step over all ranks (LoadedBatch::step_samples); empty: not known
  // to the plan (fixed-shape batches: every rank's batch has the same size).
  std::vector<int64_t> step_samples;

  int64_t num_batches() const { return batch_starts.empty() ? 0 : static_cast<int64_t>(batch_starts.size()) - 1; }
  std::span<const int64_t> batch(int64_t b) const;
  bool has_rows() const { return !batch_row_starts.empty(); }
  int64_t batch_rows(int64_t b) const;  // rows of batch b, or its samples when the plan has no rows
  RowBatch row_batch(int64_t b) const;  // only when has_rows()
  // Checks that the row fields agree with the batches (the loader calls it on every plan).
  void check_rows() const;
};

// Groups samples into batches. Fixed-size batching is below; batching to a token budget
// (variable sample count per batch) is another implementation of the same interface.
class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  virtual EpochPlan plan(int64_t epoch) const = 0;
  virtual int64_t num_batches(int64_t epoch) const = 0;
  // Most samples any batch holds: the capacity of the loader's buffers.
  virtual int64_t max_batch_size() const = 0;
};

// Consecutive batches of batch_size samples; the last is smaller, or dropped with drop_last.
class FixedSizeBatchSampler final : public BatchSampler {
 public:
  FixedSizeBatchSampler(std::unique_ptr<Sampler> sampler, int64_t batch_size, bool drop_last);
  EpochPlan plan(int64_t epoch) const override;
  int64_t num_batches(int64_t epoch) const override;
  int64_t max_batch_size() const override;  // min(batch_size, samples per epoch)
  const Sampler& sampler() const { return *sampler_; }

 private:
  std::unique_ptr<Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

// NOTE [ Fixed shards ] (launch/training_run.h): the global batch as `shards` fixed parts. Shard
// s draws from the epoch's order exactly as rank s of a DistributedSampler over `shards` ranks
// would, in batches of `shard_batch`; a process owning shards [first, first + count) gets, for
// each step, their batches one after another (shard `first`'s first). Its batches therefore cut
// into `count` equal micro-batches, each the batch that shard's own rank would have on a world of
// `shards` ranks, whatever the world size this process belongs to.
struct ShardedBatchSamplerOptions {
  int64_t shards = 1;       // S: the global batch's parts
  int64_t first_shard = 0;  // this process's parts: [first_shard, first_shard + shard_count)
  int64_t shard_count = 1;
  int64_t shard_batch = 1;  // samples per shard per step (the global batch / S)
  bool shuffle = true;
  uint64_t seed = 0;  // the same on every rank
  bool drop_last = false;
};

class ShardedBatchSampler final : public BatchSampler {
 public:
  ShardedBatchSampler(int64_t dataset_size, const ShardedBatchSamplerOptions& options);
  EpochPlan plan(int64_t epoch) const override;
  int64_t num_batches(int64_t epoch) const override;
  int64_t max_batch_size() const override;  // shard_count x min(shard_batch, samples per shard)
  // Samples per step in each micro-batch of step `b` (equal across the owned shards).
  int64_t shard_samples(int64_t b) const;

 private:
  std::vector<DistributedSampler> shards_;  // the owned ones, in order
  ShardedBatchSamplerOptions options_;
};

}  // namespace dp
