// Token batching: fixed and max_tokens batching, per-step rank balancing and sequence packing,
// planned per epoch as a pure function. See NOTE [ Token batching ] in token_batching.h.
#include "runtime/data/token_batching.h"

#include <algorithm>
#include <cstddef>
#include <iomanip>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/data/sampler.h"

namespace dp {
namespace {

// An epoch draws several independent orders; each has its own stream of epoch_permutation (the
// sequence order itself uses the plain seed, as the image samplers do).
constexpr uint64_t kRowOrderStream = 0x5D3F1A7C9B2E4D61ull;
constexpr uint64_t kBatchOrderStream = 0xA24BAED4963EE407ull;

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();

// Row ids per rank for one step.
using Assignment = std::vector<std::vector<int64_t>>;

int64_t saturating_mul(int64_t a, int64_t b) {  // a, b >= 0
  return b != 0 && a > kNoLimit / b ? kNoLimit : a * b;
}

// padded_row_length without the argument checks, for the planner's inner loops.
int64_t pad_length(int64_t length, const TokenBatchingOptions& o) {
  const int64_t rest = length % o.pad_to_multiple;
  if (rest == 0) return length;
  const int64_t up = o.pad_to_multiple - rest;  // compared, not added: pad_to_multiple may be huge
  return up >= o.max_seq_length - length ? o.max_seq_length : length + up;
}

std::vector<int64_t> visiting_order(int64_t n, const TokenBatchingOptions& o, uint64_t stream, int64_t epoch) {
  if (o.shuffle) return epoch_permutation(n, o.seed ^ stream, epoch);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

// Stably sorts `ids` by length_of(id) in [1, max_length], shortest or longest first. A counting
// sort (linear; the epoch-wide sorts dominate planning time otherwise) when the lengths' range is
// small next to the ids, else std::stable_sort; the order is the same either way.
template <typename LengthOf>
void sort_by_length(std::vector<int64_t>& ids, LengthOf length_of, int64_t max_length, bool longest_first) {
  if (max_length > 2 * static_cast<int64_t>(ids.size())) {
    if (longest_first)
      std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return length_of(a) > length_of(b); });
    else
      std::stable_sort(ids.begin(), ids.end(), [&](int64_t a, int64_t b) { return length_of(a) < length_of(b); });
    return;
  }
  const auto key = [&](int64_t id) { return longest_first ? max_length - length_of(id) : length_of(id) - 1; };
  std::vector<int64_t> starts(static_cast<size_t>(max_length) + 1, 0);
  for (int64_t id : ids) ++starts[key(id) + 1];
  std::partial_sum(starts.begin(), starts.end(), starts.begin());
  std::vector<int64_t> sorted(ids.size());
  for (int64_t id : ids) sorted[starts[key(id)]++] = id;
  ids = std::move(sorted);
}

// The epoch's rows: row r holds sequences[starts[r], starts[r + 1]), lengths[r] real tokens.
struct Rows {
  std::vector<int64_t> sequences, starts, lengths;
  int64_t size() const { return static_cast<int64_t>(lengths.size()); }
  int64_t sequence_count(int64_t r) const { return starts[r + 1] - starts[r]; }
};

Rows one_sequence_per_row(std::span<const int32_t> lengths) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  Rows rows;
  rows.sequences.resize(static_cast<size_t>(n));
  std::iota(rows.sequences.begin(), rows.sequences.end(), int64_t{0});
  rows.starts.resize(static_cast<size_t>(n) + 1);
  std::iota(rows.starts.begin(), rows.starts.end(), int64_t{0});
  rows.lengths.assign(lengths.begin(), lengths.end());
  return rows;
}

// Best-fit decreasing into rows of `capacity` tokens. Sequences of equal length are taken in
// `order` (the epoch's shuffle), so which of them share a row changes every epoch while the rows'
// lengths, which depend only on the lengths, do not.
Rows pack_best_fit_decreasing(std::span<const int32_t> lengths, std::vector<int64_t> order, int64_t capacity) {
  const auto length_of = [&](int64_t sequence) { return int64_t{lengths[sequence]}; };
  sort_by_length(order, length_of, capacity, /*longest_first=*/true);
  std::vector<int64_t> row_of(order.size());
  std::vector<int64_t> row_lengths;
  // Open rows by their free room. Last opened first within a room: any fixed choice is
  // deterministic, and this one is O(1).
  std::map<int64_t, std::vector<int64_t>> open_rows_by_room;
  for (size_t k = 0; k < order.size(); ++k) {
    const int64_t length = lengths[order[k]];
    int64_t row;
    const auto best = open_rows_by_room.lower_bound(length);
    if (best == open_rows_by_room.end()) {
      row = static_cast<int64_t>(row_lengths.size());
      row_lengths.push_back(0);
    } else {
      row = best->second.back();
      best->second.pop_back();
      if (best->second.empty()) open_rows_by_room.erase(best);
    }
    row_lengths[row] += length;
    const int64_t room = capacity - row_lengths[row];
    if (room > 0) open_rows_by_room[room].push_back(row);
    row_of[k] = row;
  }
  // Counting sort by row; a row keeps its sequences in the order they went in, longest first.
  Rows rows;
  rows.lengths = std::move(row_lengths);
  rows.starts.assign(rows.lengths.size() + 1, 0);
  for (int64_t row : row_of) ++rows.starts[row + 1];
  std::partial_sum(rows.starts.begin(), rows.starts.end(), rows.starts.begin());
  rows.sequences.resize(order.size());
  std::vector<int64_t> next(rows.starts.begin(), rows.starts.end() - 1);
  for (size_t k = 0; k < order.size(); ++k) rows.sequences[next[row_of[k]]++] = order[k];
  return rows;
}

void check_options(const TokenBatchingOptions& o) {
  DP_CHECK(o.world_size >= 1, "token batching: world_size must be at least 1, got ", o.world_size);
  DP_CHECK(o.max_seq_length >= 1 && o.max_seq_length <= std::numeric_limits<int32_t>::max(),
           "data.max_seq_length must be in [1, 2147483647], got ", o.max_seq_length);
  DP_CHECK(o.pad_to_multiple >= 1, "data.pad_to_multiple must be at least 1 (1: pad to the longest row exactly), got ",
           o.pad_to_multiple);
  DP_CHECK(o.size_multiple >= 1, "data.size_multiple must be at least 1 (1: any batch size), got ", o.size_multiple);
  if (o.batching == TokenBatching::Fixed) {
    DP_CHECK(o.batch_size >= 1, "data.batch_size must be at least 1 with fixed batching (rows per global step), got ",
             o.batch_size);
    DP_CHECK(o.batch_size % o.world_size == 0, "data.batch_size ", o.batch_size,
             " is the global batch and must be divisible by the world size ", o.world_size,
             " (each rank takes batch_size / world_size); choose a multiple of ", o.world_size);
  } else {
    DP_CHECK(o.max_tokens >= 1, "data.max_tokens must be at least 1 with max_tokens batching (padded tokens per ",
             "rank batch, e.g. 16384), got ", o.max_tokens);
    DP_CHECK(o.packing == SequencePacking::None || o.max_tokens >= o.max_seq_length, "data.max_tokens ", o.max_tokens,
             " is less than one packed row of data.max_seq_length ", o.max_seq_length,
             " tokens: raise data.max_tokens to at least ", o.max_seq_length, " or lower data.max_seq_length");
  }
}

void check_lengths(std::span<const int32_t> lengths, const TokenBatchingOptions& o) {
  DP_CHECK(!lengths.empty(), "token batching: the data set has no sequences, so there is nothing to train on");
  const auto name = [&](int64_t i) { return o.name_sequence ? o.name_sequence(i) : "sequence " + std::to_string(i); };
  const int64_t n = static_cast<int64_t>(lengths.size());
  int64_t longest = 0, first_too_long = -1, too_long = 0;
  for (int64_t i = 0; i < n; ++i) {
    DP_CHECK(lengths[i] >= 1, name(i), " has ", lengths[i],
             " tokens: every sequence needs at least one, so the data is broken (drop empty sequences when "
             "preparing it)");
    if (lengths[i] > lengths[longest]) longest = i;
    if (lengths[i] > o.max_seq_length) {
      if (first_too_long < 0) first_too_long = i;
      ++too_long;
    }
  }
  if (too_long > 0) {
    std::ostringstream os;
    os << name(first_too_long) << " has " << lengths[first_too_long]
       << " tokens, more than data.max_seq_length " << o.max_seq_length;
    if (too_long > 1)
      os << " (" << too_long << " sequences are longer; the longest, " << name(longest) << ", has "
         << lengths[longest] << ")";
    os << ": raise data.max_seq_length to at least " << lengths[longest]
       << " (the model's position embeddings permitting) or truncate the sequences when preparing the data";
    throw Error(os.str());
  }
  // Packed rows are checked against max_tokens in check_options: no row exceeds max_seq_length.
  if (o.batching == TokenBatching::MaxTokens && o.packing == SequencePacking::None) {
    const int64_t padded = pad_length(lengths[longest], o);
    if (padded > o.max_tokens) {
      std::ostringstream os;
      os << name(longest) << " has " << lengths[longest] << " tokens";
      if (padded != lengths[longest])
        os << ", " << padded << " padded (data.pad_to_multiple " << o.pad_to_multiple << ")";
      os << ", more than data.max_tokens " << o.max_tokens
         << " allows in a rank batch: raise data.max_tokens to at least " << padded
         << " (the longest sequence's padded length)";
      throw Error(os.str());
    }
  }
}

RankBatch make_rank_batch(const Rows& rows, std::span<const int64_t> row_ids, const TokenBatchingOptions& o) {
  DP_ASSERT(!row_ids.empty());
  RankBatch batch;
  batch.row_starts.reserve(row_ids.size() + 1);
  batch.row_starts.push_back(0);
  int64_t longest = 0;
  for (int64_t r : row_ids) {
    batch.sequences.insert(batch.sequences.end(), rows.sequences.begin() + rows.starts[r],
                           rows.sequences.begin() + rows.starts[r + 1]);
    batch.row_starts.push_back(static_cast<int64_t>(batch.sequences.size()));
    batch.tokens += rows.lengths[r];
    longest = std::max(longest, rows.lengths[r]);
  }
  batch.padded_length = pad_length(longest, o);
  return batch;
}

TokenStep make_step(const Rows& rows, const Assignment& assignment, const TokenBatchingOptions& o) {
  DP_ASSERT(static_cast<int64_t>(assignment.size()) == o.world_size);
  TokenStep step;
  step.ranks.reserve(assignment.size());
  for (const std::vector<int64_t>& row_ids : assignment) {
    step.ranks.push_back(make_rank_batch(rows, row_ids, o));
    const RankBatch& batch = step.ranks.back();
    step.tokens += batch.tokens;
    step.sequences += static_cast<int64_t>(batch.sequences.size());
    step.padded_tokens += batch.padded_tokens();
  }
  return step;
}

// `parts` consecutive, equally long pieces of `pool` (its size divides by parts).
Assignment equal_pieces(std::span<const int64_t> pool, int64_t parts) {
  DP_ASSERT(static_cast<int64_t>(pool.size()) % parts == 0);
  const size_t piece = pool.size() / static_cast<size_t>(parts);
  Assignment assignment;
  for (int64_t p = 0; p < parts; ++p)
    assignment.emplace_back(pool.begin() + static_cast<ptrdiff_t>(p * piece),
                            pool.begin() + static_cast<ptrdiff_t>((p + 1) * piece));
  return assignment;
}

// Until there are `count` pieces: halve the piece with the most rows (the first of equals), the
// second half going right after it. A part of a piece never costs more than the piece.
void split_until(Assignment& pieces, int64_t count) {
  while (static_cast<int64_t>(pieces.size()) < count) {
    const auto largest = std::max_element(pieces.begin(), pieces.end(),
                                          [](const auto& a, const auto& b) { return a.size() < b.size(); });
    DP_ASSERT(largest->size() >= 2);
    const ptrdiff_t keep = static_cast<ptrdiff_t>((largest->size() + 1) / 2);
    std::vector<int64_t> second(largest->begin() + keep, largest->end());
    largest->resize(static_cast<size_t>(keep));
    pieces.insert(largest + 1, std::move(second));
  }
}

// SortAndDeal: the pool's rows, longest first, cut into `parts` consecutive runs so that the
// largest run's padded tokens is as small as possible (NOTE [ Token batching ]); nullopt when no
// cut keeps every run within `cap`. A run's cost is rows x its first row's padded length, and a
// shorter run inside it costs no more, so "fewest runs within a bound" is greedy (each run as long
// as the bound allows) and the smallest feasible bound is found by binary search.
std::optional<Assignment> sort_and_deal(const Rows& rows, std::vector<int64_t> pool, int64_t parts, int64_t cap,
                                        const TokenBatchingOptions& o) {
  const int64_t n = static_cast<int64_t>(pool.size());
  DP_ASSERT(n >= parts);
  const auto row_length = [&](int64_t r) { return rows.lengths[r]; };
  sort_by_length(pool, row_length, o.max_seq_length, /*longest_first=*/true);
  std::vector<int64_t> padded(pool.size());
  for (int64_t i = 0; i < n; ++i) padded[i] = pad_length(rows.lengths[pool[i]], o);
  const auto run_end = [&](int64_t begin, int64_t bound) { return begin + std::min(n - begin, bound / padded[begin]); };
  const auto runs_needed = [&](int64_t bound) {
    int64_t runs = 0;
    for (int64_t i = 0; i < n && runs <= parts; ++runs) i = run_end(i, bound);
    return runs;
  };
  int64_t low = padded[0], high = std::min(cap, saturating_mul(n, padded[0]));
  if (high < low || runs_needed(high) > parts) return std::nullopt;
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (runs_needed(mid) <= parts)
      high = mid;
    else
      low = mid + 1;
  }
  // Many cuts reach the bound. Greedy from the longest rows fills the first runs to it, with
  // shorter rows padded to their longest; greedy from the shortest (each run starting as early
  // as the bound allows) leaves the slack to the longest rows instead. Keep whichever pads less.
  std::vector<int64_t> from_longest{0}, from_shortest{n};
  while (from_longest.back() < n) from_longest.push_back(run_end(from_longest.back(), low));
  while (from_shortest.back() > 0) {
    // The earliest start whose run to `end` fits: the predicate only turns false going left.
    const int64_t end = from_shortest.back();
    int64_t first = 0, last = end - 1;
    while (first < last) {
      const int64_t start = first + (last - first) / 2;
      if (end - start <= low / padded[start])
        last = start;
      else
        first = start + 1;
    }
    from_shortest.push_back(first);
  }
  std::reverse(from_shortest.begin(), from_shortest.end());
  const auto padded_total = [&](const std::vector<int64_t>& cuts) {
    int64_t total = 0;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) total += (cuts[k + 1] - cuts[k]) * padded[cuts[k]];
    return total;
  };
  // Both are fewest-run cuts (the argument above holds from either end); the size check is cheap.
  const bool shortest_first = static_cast<int64_t>(from_shortest.size()) - 1 <= parts &&
                              padded_total(from_shortest) < padded_total(from_longest);
  const std::vector<int64_t>& cuts = shortest_first ? from_shortest : from_longest;
  Assignment runs;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) runs.emplace_back(pool.begin() + cuts[k], pool.begin() + cuts[k + 1]);
  split_until(runs, parts);
  return runs;
}

int64_t sequences_in(const Rows& rows, std::span<const int64_t> row_ids) {
  int64_t count = 0;
  for (int64_t r : row_ids) count += rows.sequence_count(r);
  return count;
}

// Fixed batching (NOTE [ Token batching ]); appends the steps, counts dropped and repeated
// sequences into `stats`.
void plan_fixed(const Rows& rows, const std::vector<int64_t>& row_order, const TokenBatchingOptions& o,
                std::vector<TokenStep>& steps, TokenEpochStats& stats) {
  const int64_t world = o.world_size, batch = o.batch_size, n = rows.size();
  const std::span<const int64_t> order(row_order);
  const bool balance = o.balance == RankBalance::SortAndDeal && world > 1;
  const auto assign = [&](std::span<const int64_t> pool) {
    if (!balance) return equal_pieces(pool, world);
    std::optional<Assignment> dealt = sort_and_deal(rows, {pool.begin(), pool.end()}, world, kNoLimit, o);
    DP_ASSERT(dealt.has_value());  // no cap: one run of everything is always within it
    return std::move(*dealt);
  };
  for (int64_t s = 0; s < n / batch; ++s) steps.push_back(make_step(rows, assign(order.subspan(s * batch, batch)), o));
  const std::span<const int64_t> rest = order.subspan(n / batch * batch);
  if (rest.empty()) return;
  if (o.drop_last) {
    stats.dropped_sequences += sequences_in(rows, rest);
    return;
  }
  // Pad to a multiple of the world size with the epoch's first rows (DistributedSampler's rule).
  std::vector<int64_t> pool(rest.begin(), rest.end());
  for (int64_t k = 0; static_cast<int64_t>(pool.size()) % world != 0; ++k) {
    pool.push_back(order[k % n]);
    stats.repeated_sequences += rows.sequence_count(pool.back());
  }
  steps.push_back(make_step(rows, assign(pool), o));
}

// MaxTokens batching (NOTE [ Token batching ]).
void plan_max_tokens(const Rows& rows, const std::vector<int64_t>& row_order, const TokenBatchingOptions& o,
                     int64_t epoch, std::vector<TokenStep>& steps, TokenEpochStats& stats) {
  const int64_t world = o.world_size, n = rows.size();
  std::vector<int64_t> sorted = row_order;
  const auto row_length = [&](int64_t r) { return rows.lengths[r]; };
  sort_by_length(sorted, row_length, o.max_seq_length, /*longest_first=*/false);

  // fairseq's batch_by_size over the ascending order: row i is the longest so far, so a batch
  // [start, i] costs (i - start + 1) x padded(i). Compared by division: no overflow.
  std::vector<int64_t> batch_starts{0};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t fits = o.max_tokens / pad_length(rows.lengths[sorted[i]], o);  // rows of this length per batch
    int64_t size = i - batch_starts.back();
    if (size > 0 && size + 1 > fits) {
      batch_starts.push_back(batch_starts.back() +
                             (size >= o.size_multiple ? size / o.size_multiple * o.size_multiple : size));
      // The rows carried over (fewer than size_multiple) may not fit beside row i either.
      size = i - batch_starts.back();
      if (size > 0 && size + 1 > fits) batch_starts.push_back(i);
    }
  }
  batch_starts.push_back(n);
  const int64_t batches = static_cast<int64_t>(batch_starts.size()) - 1;
  const auto batch_rows = [&](int64_t b) {
    return std::span<const int64_t>(sorted).subspan(batch_starts[b], batch_starts[b + 1] - batch_starts[b]);
  };

  const std::vector<int64_t> batch_order = visiting_order(batches, o, kBatchOrderStream, epoch);
  const bool balance = o.balance == RankBalance::SortAndDeal && world > 1;
  const auto step_batches = [&](int64_t first, int64_t count) {
    Assignment pieces;
    for (int64_t k = first; k < first + count; ++k) {
      const std::span<const int64_t> b = batch_rows(batch_order[k]);
      pieces.emplace_back(b.begin(), b.end());
    }
    return pieces;
  };
  const auto pooled = [](const Assignment& pieces) {
    std::vector<int64_t> pool;
    for (const std::vector<int64_t>& piece : pieces) pool.insert(pool.end(), piece.begin(), piece.end());
    return pool;
  };

  for (int64_t s = 0; s < batches / world; ++s) {
    Assignment assignment = step_batches(s * world, world);
    if (balance) {
      // The step's own batches are a run split within max_tokens, so this cannot fail; keep them
      // if it ever did rather than exceed the budget.
      if (std::optional<Assignment> dealt = sort_and_deal(rows, pooled(assignment), world, o.max_tokens, o))
        assignment = std::move(*dealt);
    }
    steps.push_back(make_step(rows, assignment, o));
  }
  const int64_t left = batches % world;
  if (left == 0) return;
  Assignment pieces = step_batches(batches - left, left);
  if (o.drop_last) {
    for (const std::vector<int64_t>& piece : pieces) stats.dropped_sequences += sequences_in(rows, piece);
    return;
  }
  // At least one row per rank: repeat the epoch's first rows (in visiting order), one per piece.
  int64_t have = 0;
  for (const std::vector<int64_t>& piece : pieces) have += static_cast<int64_t>(piece.size());
  for (int64_t b = 0, in_batch = 0; have < world; ++have) {
    while (in_batch >= static_cast<int64_t>(batch_rows(batch_order[b]).size())) {
      b = (b + 1) % batches;
      in_batch = 0;
    }
    const int64_t row = batch_rows(batch_order[b])[in_batch++];
    pieces.push_back({row});
    stats.repeated_sequences += rows.sequence_count(row);
  }
  std::optional<Assignment> dealt;
  if (balance) dealt = sort_and_deal(rows, pooled(pieces), world, o.max_tokens, o);
  if (!dealt) split_until(pieces, world);
  steps.push_back(make_step(rows, dealt ? *dealt : pieces, o));
}

TokenEpochStats epoch_stats(const std::vector<TokenStep>& steps, TokenEpochStats stats) {
  stats.steps = static_cast<int64_t>(steps.size());
  double imbalance_sum = 0;
  for (int64_t s = 0; s < stats.steps; ++s) {
    const TokenStep& step = steps[s];
    stats.tokens += step.tokens;
    stats.padded_tokens += step.padded_tokens;
    stats.sequences += step.sequences;
    stats.bottleneck_padded_tokens += step.max_rank_padded_tokens();
    const double imbalance = step.imbalance();
    imbalance_sum += imbalance;
    if (s == 0 || imbalance > stats.worst_imbalance) {
      stats.worst_imbalance = imbalance;
      stats.worst_imbalance_step = s;
    }
    for (const RankBatch& batch : step.ranks) {
      stats.rows += batch.num_rows();
      stats.max_rows = std::max(stats.max_rows, batch.num_rows());
      stats.max_padded_tokens = std::max(stats.max_padded_tokens, batch.padded_tokens());
      ++stats.batch_sizes[batch.num_rows()];
      ++stats.padded_lengths[batch.padded_length];
    }
  }
  if (stats.steps > 0) stats.mean_imbalance = imbalance_sum / static_cast<double>(stats.steps);
  if (stats.padded_tokens > 0)
    stats.padding_waste = 1.0 - static_cast<double>(stats.tokens) / static_cast<double>(stats.padded_tokens);
  return stats;
}

// "8:10 16:300 24:102": the `limit` most frequent entries (the smaller key of equals), in key
// order, then "+N more".
std::string histogram_text(const std::map<int64_t, int64_t>& histogram, size_t limit) {
  std::vector<std::pair<int64_t, int64_t>> entries(histogram.begin(), histogram.end());
  if (entries.size() > limit) {
    std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    entries.resize(limit);
    std::sort(entries.begin(), entries.end());
  }
  std::ostringstream os;
  for (size_t i = 0; i < entries.size(); ++i) os << (i > 0 ? " " : "") << entries[i].first << ":" << entries[i].second;
  if (histogram.size() > entries.size()) os << " +" << histogram.size() - entries.size() << " more";
  return os.str();
}

}  // namespace

std::span<const int64_t> RankBatch::row(int64_t r) const {
  DP_CHECK(r >= 0 && r < num_rows(), "RankBatch: row ", r, " is outside [0, ", num_rows(), ")");
  return std::span<const int64_t>(sequences).subspan(row_starts[r], row_starts[r + 1] - row_starts[r]);
}

int64_t TokenStep::max_rank_padded_tokens() const {
  int64_t largest = 0;
  for (const RankBatch& batch : ranks) largest = std::max(largest, batch.padded_tokens());
  return largest;
}

double TokenStep::imbalance() const {
  if (ranks.empty() || padded_tokens == 0) return 1.0;
  return static_cast<double>(max_rank_padded_tokens()) * static_cast<double>(ranks.size()) /
         static_cast<double>(padded_tokens);
}

double TokenStep::padding_waste() const {
  return padded_tokens == 0 ? 0.0 : 1.0 - static_cast<double>(tokens) / static_cast<double>(padded_tokens);
}

int64_t padded_row_length(int64_t length, const TokenBatchingOptions& options) {
  DP_CHECK(options.pad_to_multiple >= 1, "data.pad_to_multiple must be at least 1, got ", options.pad_to_multiple);
  DP_CHECK(length >= 1 && length <= options.max_seq_length, "padded_row_length: a row of ", length,
           " tokens is outside [1, data.max_seq_length ", options.max_seq_length, "]");
  return pad_length(length, options);
}

TokenEpochPlan plan_token_epoch(std::span<const int32_t> lengths, const TokenBatchingOptions& options, int64_t epoch) {
  const TokenBatchingOptions& o = options;
  check_options(o);
  check_lengths(lengths, o);
  const int64_t n = static_cast<int64_t>(lengths.size());
  const std::vector<int64_t> sequence_order = visiting_order(n, o, 0, epoch);
  const bool packed = o.packing == SequencePacking::Greedy;
  const Rows rows =
      packed ? pack_best_fit_decreasing(lengths, sequence_order, o.max_seq_length) : one_sequence_per_row(lengths);
  // Unpacked, row i is sequence i and the sequence order is the row order. Packed rows come out
  // longest first, so they need a shuffle of their own.
  const std::vector<int64_t> row_order =
      packed ? visiting_order(rows.size(), o, kRowOrderStream, epoch) : sequence_order;

  TokenEpochPlan plan;
  TokenEpochStats counts;
  if (o.batching == TokenBatching::Fixed) {
    plan_fixed(rows, row_order, o, plan.steps, counts);
    if (plan.steps.empty()) {  // only with drop_last: otherwise the rest makes a step
      const int64_t largest = rows.size() / o.world_size * o.world_size;
      std::ostringstream os;
      os << "data.batch_size " << o.batch_size << " is larger than the " << rows.size()
         << (packed ? " packed rows" : " sequences") << " of an epoch and data.drop_last is true, so the epoch has no "
         << "step: ";
      if (largest > 0) os << "lower data.batch_size to at most " << largest << " or ";
      os << "set data.drop_last: false";
      throw Error(os.str());
    }
  } else {
    plan_max_tokens(rows, row_order, o, epoch, plan.steps, counts);
    DP_CHECK(!plan.steps.empty(), "the ", n, " sequences make fewer rank batches of data.max_tokens ", o.max_tokens,
             " than the world size ", o.world_size, " and data.drop_last is true, so the epoch has no step: ",
             "lower data.max_tokens or set data.drop_last: false");
  }
  plan.stats = epoch_stats(plan.steps, counts);
  return plan;
}

std::string describe(const TokenEpochStats& stats) {
  constexpr size_t kHistogramEntries = 8;
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << "padding waste " << stats.padding_waste * 100.0 << " %"
     << std::setprecision(2) << " | rank imbalance mean " << stats.mean_imbalance << " worst " << stats.worst_imbalance
     << " | " << stats.steps << (stats.steps == 1 ? " step" : " steps") << " | batch sizes "
     << histogram_text(stats.batch_sizes, kHistogramEntries) << " | padded lengths "
     << histogram_text(stats.padded_lengths, kHistogramEntries);
  if (stats.rows > 0 && stats.sequences != stats.rows)
    os << " | " << static_cast<double>(stats.sequences) / static_cast<double>(stats.rows) << " sequences per row";
  if (stats.dropped_sequences > 0)
    os << " | " << stats.dropped_sequences << (stats.dropped_sequences == 1 ? " sequence" : " sequences")
       << " dropped (data.drop_last)";
  if (stats.repeated_sequences > 0)
    os << " | " << stats.repeated_sequences << (stats.repeated_sequences == 1 ? " sequence" : " sequences")
       << " repeated to fill the last step";
  return os.str();
}

void row_layout(std::span<const int64_t> row, std::span<const int32_t> lengths, std::span<int64_t> sequence_ids,
                std::span<int64_t> position_ids) {
  DP_CHECK(sequence_ids.size() == position_ids.size(), "row_layout: sequence_ids has ", sequence_ids.size(),
           " entries and position_ids ", position_ids.size(), "; both must have the row's padded length");
  size_t token = 0;
  int64_t sequence_id = 0;
  for (int64_t sequence : row) {
    DP_CHECK(sequence >= 0 && sequence < static_cast<int64_t>(lengths.size()), "row_layout: sequence ", sequence,
             " is outside the ", lengths.size(), " lengths given");
    const size_t length = static_cast<size_t>(std::max<int32_t>(lengths[sequence], 0));
    DP_CHECK(length <= sequence_ids.size() - token, "row_layout: the row's sequences have more tokens than its padded ",
             "length ", sequence_ids.size());
    ++sequence_id;
    for (size_t p = 0; p < length; ++p, ++token) {
      sequence_ids[token] = sequence_id;
      position_ids[token] = static_cast<int64_t>(p);
    }
  }
  std::fill(sequence_ids.begin() + static_cast<ptrdiff_t>(token), sequence_ids.end(), 0);
  std::fill(position_ids.begin() + static_cast<ptrdiff_t>(token), position_ids.end(), 0);
}

TokenBatchSampler::TokenBatchSampler(std::vector<int32_t> lengths, std::vector<int32_t> targets,
                                     const TokenBatchingOptions& options, int rank)
    : lengths_(std::move(lengths)), targets_(std::move(targets)), options_(options), rank_(rank) {
  DP_CHECK(rank_ >= 0 && rank_ < options_.world_size, "TokenBatchSampler: rank ", rank_, " is outside the world of ",
           options_.world_size);
  DP_CHECK(targets_.empty() || targets_.size() == lengths_.size(), "TokenBatchSampler: ", targets_.size(),
           " target counts for ", lengths_.size(), " sequences");
  const TokenEpochPlan first = plan_token_epoch(lengths_, options_, 0);
  take_first_plan(first);
  // Balancing deals a step's rows anew every epoch; without it fixed batches hold batch_size /
  // world_size rows, and max_tokens batches (the same every epoch) epoch 0's largest.
  int64_t shortest = std::numeric_limits<int64_t>::max();
  for (const int32_t length : lengths_) shortest = std::min<int64_t>(shortest, length);
  const int64_t rows = first.stats.rows;
  if (options_.balance == RankBalance::None) {
    max_rows_ = first.stats.max_rows;
  } else if (options_.batching == TokenBatching::Fixed) {
    max_rows_ = std::min(rows, options_.batch_size);  // a step's rows on one rank at worst
  } else {
    // A row costs at least its padded length, and packed rows hold at least the shortest sequence.
    max_rows_ = std::min(rows, options_.max_tokens / padded_row_length(shortest, options_));
  }
  max_rows_ = std::max(max_rows_, first.stats.max_rows);
}

void TokenBatchSampler::take_first_plan(const TokenEpochPlan& first) {
  // The first plan has checked every sequence; later ones find nothing to name, and the data
  // set the namer may refer to need not outlive this sampler.
  options_.name_sequence = nullptr;
  steps_ = static_cast<int64_t>(first.steps.size());
  max_rows_ = first.stats.max_rows;
  for (const TokenStep& step : first.steps)
    for (const RankBatch& b : step.ranks)
      if (b.padded_tokens() > largest_.padded_tokens()) largest_ = b;
}

std::unique_ptr<TokenBatchSampler> TokenBatchSampler::for_evaluation(std::span<const int32_t> lengths,
                                                                     TokenBatchingOptions options, int rank,
                                                                     int world_size) {
  const int64_t n = static_cast<int64_t>(lengths.size());
  const int64_t begin = n * rank / world_size, end = n * (rank + 1) / world_size;
  auto sampler = std::unique_ptr<TokenBatchSampler>(new TokenBatchSampler());
  options.world_size = 1;
  options.shuffle = false;
  options.drop_last = false;
  options.balance = RankBalance::None;
  // Errors name the sequences by their index in `lengths`, not in this rank's slice.
  options.name_sequence = [outer = std::move(options.name_sequence), begin](int64_t i) {
    return outer ? outer(begin + i) : "sequence " + std::to_string(begin + i);
  };
  if (options.batching == TokenBatching::Fixed) options.batch_size = std::max<int64_t>(1, options.batch_size);
  sampler->options_ = options;
  for (int64_t i = begin; i < end; ++i) {
    sampler->lengths_.push_back(lengths[i]);
    sampler->ids_.push_back(i);
  }
  if (sampler->lengths_.empty()) return sampler;  // no batch
  sampler->take_first_plan(plan_token_epoch(sampler->lengths_, options, 0));
  return sampler;
}

int64_t TokenBatchSampler::num_batches(int64_t) const { return steps_; }

TokenEpochStats TokenBatchSampler::epoch_stats(int64_t epoch) const {
  if (lengths_.empty()) return {};
  {
    std::lock_guard lock(stats_mutex_);
    if (stats_epoch_ == epoch) return stats_;
  }
  return plan_token_epoch(lengths_, options_, epoch).stats;
}

EpochPlan TokenBatchSampler::plan(int64_t epoch) const {
  EpochPlan out;
  if (lengths_.empty()) return out;
  const TokenEpochPlan plan = plan_token_epoch(lengths_, options_, epoch);
  DP_CHECK(static_cast<int64_t>(plan.steps.size()) == steps_, "TokenBatchSampler: epoch ", epoch, " plans ",
           plan.steps.size(), " steps, epoch 0 planned ", steps_);
  {
    std::lock_guard lock(stats_mutex_);
    stats_epoch_ = epoch;
    stats_ = plan.stats;
  }
  out.batch_starts.push_back(0);
  out.row_starts.push_back(0);
  out.batch_row_starts.push_back(0);
  for (const TokenStep& step : plan.steps) {
    const RankBatch& mine = step.ranks[static_cast<size_t>(rank_)];
    for (int64_t r = 0; r < mine.num_rows(); ++r) {
      for (const int64_t sequence : mine.row(r)) out.indices.push_back(ids_.empty() ? sequence : ids_[sequence]);
      out.row_starts.push_back(static_cast<int64_t>(out.indices.size()));
    }
    out.batch_starts.push_back(static_cast<int64_t>(out.indices.size()));
    out.batch_row_starts.push_back(static_cast<int64_t>(out.row_starts.size()) - 1);
    out.padded_lengths.push_back(mine.padded_length);
    int64_t targets = 0, samples = 0;
    for (const RankBatch& b : step.ranks) {
      samples += static_cast<int64_t>(b.sequences.size());
      if (!targets_.empty())
        for (const int64_t sequence : b.sequences) targets += targets_[sequence];
    }
    out.step_targets.push_back(targets);
    out.step_samples.push_back(samples);
  }
  return out;
}

}  // namespace dp
