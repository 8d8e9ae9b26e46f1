#include "runtime/data/sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/core/error.h"
#include "runtime/core/splitmix64.h"

namespace dp {
namespace {

// SplitMix64's first number from x: a bijective mix, so distinct (seed, epoch) give distinct streams.
uint64_t mix64(uint64_t x) { return SplitMix64(x).next(); }

// Uniform on [0, bound) without modulo bias (Lemire 2019), identical on every platform.
uint64_t bounded_draw(std::mt19937_64& rng, uint64_t bound) {
  unsigned __int128 product = static_cast<unsigned __int128>(rng()) * bound;
  uint64_t low = static_cast<uint64_t>(product);
  if (low < bound) {
    const uint64_t threshold = -bound % bound;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(rng()) * bound;
      low = static_cast<uint64_t>(product);
    }
  }
  return static_cast<uint64_t>(product >> 64);
}

std::vector<int64_t> iota_indices(int64_t n) {
  std::vector<int64_t> indices(static_cast<size_t>(n));
  std::iota(indices.begin(), indices.end(), int64_t{0});
  return indices;
}

void check_dataset_size(const char* sampler, int64_t n) {
  DP_CHECK(n >= 0, sampler, ": dataset size must be non-negative, got ", n);
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order = iota_indices(n);
  std::mt19937_64 rng(mix64(seed ^ mix64(static_cast<uint64_t>(epoch))));
  for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
    const int64_t j = static_cast<int64_t>(bounded_draw(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

SequentialSampler::SequentialSampler(int64_t dataset_size) : begin_(0), end_(dataset_size) {
  check_dataset_size("SequentialSampler", dataset_size);
}

SequentialSampler::SequentialSampler(int64_t dataset_size, int rank, int world_size) {
  check_dataset_size("SequentialSampler", dataset_size);
  DP_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "SequentialSampler: rank ", rank,
           " is not in a world of ", world_size);
  begin_ = dataset_size * rank / world_size;
  end_ = dataset_size * (rank + 1) / world_size;
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> v = iota_indices(end_ - begin_);
  for (int64_t& i : v) i += begin_;
  return v;
}

RandomSampler::RandomSampler(int64_t dataset_size, uint64_t seed) : dataset_size_(dataset_size), seed_(seed) {
  check_dataset_size("RandomSampler", dataset_size);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return epoch_permutation(dataset_size_, seed_, epoch);
}

DistributedSampler::DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options)
    : dataset_size_(dataset_size), options_(options) {
  check_dataset_size("DistributedSampler", dataset_size);
  DP_CHECK(options.world_size >= 1, "DistributedSampler: world_size must be at least 1, got ", options.world_size);
  DP_CHECK(options.rank >= 0 && options.rank < options.world_size, "DistributedSampler: rank ", options.rank,
           " is outside [0, world_size=", options.world_size, ")");
  const int64_t world = options.world_size;
  shard_size_ = options.drop_last ? dataset_size / world : (dataset_size + world - 1) / world;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order = options_.shuffle ? epoch_permutation(dataset_size_, options_.seed, epoch)
                                                : iota_indices(dataset_size_);
  const int64_t world = options_.world_size;
  const int64_t total = shard_size_ * world;
  // Pad with the head of the order (repeated when the data set is smaller than the padding).
  for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i) order.push_back(order[i]);
  std::vector<int64_t> shard(static_cast<size_t>(shard_size_));
  for (int64_t s = 0; s < shard_size_; ++s) shard[s] = order[options_.rank + s * world];
  return shard;
}

std::span<const int64_t> EpochPlan::batch(int64_t b) const {
  DP_CHECK(b >= 0 && b < num_batches(), "EpochPlan: batch ", b, " is outside [0, ", num_batches(), ")");
  return std::span<const int64_t>(indices).subspan(batch_starts[b], batch_starts[b + 1] - batch_starts[b]);
}

int64_t EpochPlan::batch_rows(int64_t b) const {
  if (!has_rows()) return static_cast<int64_t>(batch(b).size());
  DP_CHECK(b >= 0 && b < num_batches(), "EpochPlan: batch ", b, " is outside [0, ", num_batches(), ")");
  return batch_row_starts[b + 1] - batch_row_starts[b];
}

RowBatch EpochPlan::row_batch(int64_t b) const {
  DP_CHECK(has_rows(), "EpochPlan: batch ", b, " has no rows (a plan of fixed-shape samples)");
  RowBatch out;
  out.samples = batch(b);
  const int64_t first = batch_row_starts[b], last = batch_row_starts[b + 1];
  out.row_starts = std::span<const int64_t>(row_starts).subspan(first, last - first + 1);
  out.padded_length = padded_lengths[b];
  out.step_targets = step_targets.empty() ? 0 : step_targets[b];
  return out;
}

void EpochPlan::check_rows() const {
  if (!has_rows()) {
    DP_CHECK(row_starts.empty() && padded_lengths.empty() && step_targets.empty() && step_samples.empty(),
             "EpochPlan: row fields without batch_row_starts");
    return;
  }
  const int64_t batches = num_batches();
  DP_CHECK(static_cast<int64_t>(batch_row_starts.size()) == batches + 1 &&
               static_cast<int64_t>(padded_lengths.size()) == batches &&
               (step_targets.empty() || static_cast<int64_t>(step_targets.size()) == batches) &&
               (step_samples.empty() || static_cast<int64_t>(step_samples.size()) == batches),
           "EpochPlan: ", batches, " batches but ", batch_row_starts.size(), " batch row starts, ",
           padded_lengths.size(), " padded lengths, ", step_targets.size(), " step targets, ", step_samples.size(),
           " step sample counts");
  DP_CHECK(!row_starts.empty() && batch_row_starts.front() == 0 &&
               batch_row_starts.back() + 1 == static_cast<int64_t>(row_starts.size()),
           "EpochPlan: the batches' rows do not cover the ", row_starts.size() - 1, " rows");
  for (int64_t b = 0; b < batches; ++b) {
    DP_CHECK(batch_row_starts[b] < batch_row_starts[b + 1], "EpochPlan: batch ", b, " has no rows");
    DP_CHECK(row_starts[batch_row_starts[b]] == batch_starts[b] &&
                 row_starts[batch_row_starts[b + 1]] == batch_starts[b + 1],
             "EpochPlan: batch ", b, "'s rows do not hold its samples");
    DP_CHECK(padded_lengths[b] > 0, "EpochPlan: batch ", b, " has padded length ", padded_lengths[b]);
  }
  for (size_t k = 0; k + 1 < row_starts.size(); ++k)
    DP_CHECK(row_starts[k] < row_starts[k + 1], "EpochPlan: row ", k, " holds no sample");
}

FixedSizeBatchSampler::FixedSizeBatchSampler(std::unique_ptr<Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  DP_CHECK(sampler_ != nullptr, "FixedSizeBatchSampler: sampler is null");
  DP_CHECK(batch_size >= 1, "FixedSizeBatchSampler: batch_size must be at least 1, got ", batch_size);
}

int64_t FixedSizeBatchSampler::num_batches(int64_t) const {
  const int64_t n = sampler_->size();
  // Not (n + batch_size - 1) / batch_size: that overflows for a batch size near INT64_MAX.
  return n / batch_size_ + (!drop_last_ && n % batch_size_ != 0 ? 1 : 0);
}

int64_t FixedSizeBatchSampler::max_batch_size() const {
  // No batch holds more samples than an epoch has: a batch size beyond the dataset must not
  // make the loader allocate buffers for samples that do not exist.
  return std::max<int64_t>(1, std::min(batch_size_, sampler_->size()));
}

EpochPlan FixedSizeBatchSampler::plan(int64_t epoch) const {
  EpochPlan plan;
  plan.indices = sampler_->indices(epoch);
  const int64_t batches = num_batches(epoch);
  plan.indices.resize(std::min<size_t>(plan.indices.size(), static_cast<size_t>(batches * batch_size_)));
  plan.batch_starts.reserve(static_cast<size_t>(batches) + 1);
  for (int64_t b = 0; b < batches; ++b) plan.batch_starts.push_back(b * batch_size_);
  plan.batch_starts.push_back(static_cast<int64_t>(plan.indices.size()));
  return plan;
}

ShardedBatchSampler::ShardedBatchSampler(int64_t dataset_size, const ShardedBatchSamplerOptions& options)
    : options_(options) {
  const ShardedBatchSamplerOptions& o = options;
  DP_CHECK(o.shards >= 1 && o.shards <= std::numeric_limits<int>::max(),
           "ShardedBatchSampler: shards must be in [1, 2^31), got ", o.shards);
  DP_CHECK(o.shard_count >= 1 && o.first_shard >= 0 && o.first_shard + o.shard_count <= o.shards,
           "ShardedBatchSampler: shards [", o.first_shard, ", ", o.first_shard + o.shard_count, ") are not inside [0, ",
           o.shards, ")");
  DP_CHECK(o.shard_batch >= 1, "ShardedBatchSampler: shard_batch must be at least 1, got ", o.shard_batch);
  for (int64_t s = o.first_shard; s < o.first_shard + o.shard_count; ++s) {
    DistributedSamplerOptions d;
    d.rank = static_cast<int>(s);
    d.world_size = static_cast<int>(o.shards);
    d.shuffle = o.shuffle;
    d.seed = o.seed;
    d.drop_last = o.drop_last;
    shards_.emplace_back(dataset_size, d);
  }
}

int64_t ShardedBatchSampler::num_batches(int64_t) const {
  const int64_t n = shards_.front().size(), b = options_.shard_batch;
  return n / b + (!options_.drop_last && n % b != 0 ? 1 : 0);
}

int64_t ShardedBatchSampler::max_batch_size() const {
  return options_.shard_count * std::max<int64_t>(1, std::min(options_.shard_batch, shards_.front().size()));
}

int64_t ShardedBatchSampler::shard_samples(int64_t b) const {
  return std::min(options_.shard_batch, shards_.front().size() - b * options_.shard_batch);
}

EpochPlan ShardedBatchSampler::plan(int64_t epoch) const {
  std::vector<std::vector<int64_t>> orders;
  for (const DistributedSampler& shard : shards_) orders.push_back(shard.indices(epoch));
  EpochPlan plan;
  const int64_t batches = num_batches(epoch);
  plan.indices.reserve(static_cast<size_t>(batches * max_batch_size()));
  for (int64_t b = 0; b < batches; ++b) {
    plan.batch_starts.push_back(static_cast<int64_t>(plan.indices.size()));
    const int64_t begin = b * options_.shard_batch, count = shard_samples(b);
    for (const std::vector<int64_t>& order : orders)
      plan.indices.insert(plan.indices.end(), order.begin() + begin, order.begin() + begin + count);
  }
  plan.batch_starts.push_back(static_cast<int64_t>(plan.indices.size()));
  return plan;
}

}  // namespace dp
