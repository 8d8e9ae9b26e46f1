#include "launch/training_run.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "comm/ddp/sync_batch_norm.h"
#include "launch/graphed_step.h"
#include "models/registry.h"
#include "optim/clip_grad.h"
#include "optim/registry.h"
#include "runtime/autograd/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/core/hash.h"
#include "runtime/core/host_memory.h"
#include "runtime/io/tensor_file.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/reduce.h"

namespace dp {

namespace {

// a x b, or a dp::Error saying what overflowed.
int64_t checked_product(int64_t a, int64_t b, const char* what) {
  int64_t out = 0;
  DP_CHECK(!__builtin_mul_overflow(a, b, &out), what, " (", a, " x ", b, ") overflows a 64-bit count");
  return out;
}

void check_loader_memory(const Config& config, int64_t train_batch, int64_t train_sample_bytes, int64_t eval_batch,
                         int64_t eval_sample_bytes);

// NOTE [ Preflight ]
// Everything that would make a run train on nothing, never evaluate, wrap a count or allocate
// more than the machine has is checked here, before any buffer is allocated or step taken: a
// mistake costs seconds and names the keys to change, instead of a run that "succeeds" on zero
// steps or an out-of-memory kill with no message.
DataPlan plan_data(const Config& config, const ClassificationDataset& train_set, const Dataset& test_set,
                   int world_size) {
  const DataConfig& d = config.data;
  const int64_t n = train_set.size();
  DP_CHECK(n > 0, "the training set (", train_set.description(), ") has no samples: there is nothing to train on");
  DP_CHECK(test_set.size() > 0, "the test set (", test_set.description(), ") has no samples: the run could not be "
           "evaluated");
  DP_CHECK(config.model.num_classes >= train_set.num_classes(), "model.num_classes is ", config.model.num_classes,
           " but ", config.data.dataset, " has ", train_set.num_classes(), " classes (labels 0..",
           train_set.num_classes() - 1, "): set model.num_classes to at least ", train_set.num_classes());
  DataPlan plan;
  // NOTE [ Fixed shards ]: S parts of the global batch, S / world_size of them per rank.
  const bool fixed = config.distributed.shards > 0;
  plan.shards = fixed ? config.distributed.shards : world_size;
  DP_CHECK(plan.shards % world_size == 0, "distributed.shards ", plan.shards, " must be a multiple of the world size ",
           world_size, " (each rank trains shards / world_size of them): choose a multiple of ", world_size,
           " or 0 for one per rank");
  DP_CHECK(d.batch_size % plan.shards == 0, "data.batch_size ", d.batch_size, " is the global batch and must be ",
           "divisible by distributed.shards ", plan.shards, " (each shard takes batch_size / shards)");
  DP_CHECK(!(fixed && config.distributed.sync_batchnorm && plan.shards > world_size),
           "distributed.sync_batchnorm normalises over the global batch, which a rank training ",
           plan.shards / world_size, " shards one after another never holds at once: set distributed.shards to the ",
           "world size (", world_size, ") or turn sync_batchnorm off (BatchNorm then normalises over each shard)");
  // bf16 compression rounds each rank's gradient before the all-reduce; shards on one rank add
  // up in float32 first, so S shards on fewer ranks would not compute what S ranks compute.
  DP_CHECK(!(fixed && config.distributed.grad_dtype == "bf16" && plan.shards > world_size),
           "distributed.grad_dtype bf16 rounds each rank's gradient to bf16 before the all-reduce, but a rank ",
           "training ", plan.shards / world_size, " shards adds theirs up in float32 first, so ", world_size,
           world_size == 1 ? " rank" : " ranks", " would not compute what ", plan.shards, " ranks compute: set ",
           "distributed.shards to the world size (", world_size, ") or grad_dtype to fp32");
  plan.local_shards = plan.shards / world_size;
  plan.per_rank_batch = d.batch_size / world_size;
  plan.per_shard_batch = d.batch_size / plan.shards;
  // DistributedSampler's shard (PyTorch's semantics): padded up to a multiple of the shard count,
  // or cut down with drop_last.
  const int64_t s = plan.shards;
  const int64_t per_shard = s == 1 ? n : d.drop_last ? n / s : n / s + (n % s != 0);
  plan.shard_size = per_shard * plan.local_shards;
  const int64_t b = plan.per_shard_batch;
  plan.steps_per_epoch = d.drop_last ? per_shard / b : per_shard / b + (per_shard % b != 0);
  if (plan.steps_per_epoch == 0) {
    const char* part = fixed ? "shard" : "rank";
    std::ostringstream os;
    os << "data.batch_size " << d.batch_size;
    if (s > 1) os << " (" << b << " per " << part << " on " << s << " " << part << "s)";
    os << " is larger than the " << per_shard << " training samples " << (s > 1 ? "of each " : "")
       << (s > 1 ? part : "") << (s > 1 ? "'s part " : "") << "and data.drop_last is true, so an epoch has no full "
       << "batch and the run would train on nothing: lower data.batch_size to at most " << per_shard * s
       << " or set data.drop_last: false";
    throw Error(os.str());
  }
  plan.total_steps = checked_product(config.run.epochs, plan.steps_per_epoch, "run.epochs x steps per epoch");
  if (config.run.max_steps > 0) plan.total_steps = std::min(plan.total_steps, config.run.max_steps);

  // The loaders' buffers: (prefetch + 1) batches each, of at most the samples the split has.
  check_loader_memory(config, std::min(plan.per_rank_batch, plan.shard_size), train_set.sample_bytes(),
                      std::min(d.eval_batch_size, test_set.size()), test_set.sample_bytes());
  return plan;
}

void check_loader_memory(const Config& config, int64_t train_batch, int64_t train_sample_bytes, int64_t eval_batch,
                         int64_t eval_sample_bytes) {
  const DataConfig& d = config.data;
  const int64_t slots = d.prefetch + 1;
  const double train_bytes = static_cast<double>(train_batch) * static_cast<double>(train_sample_bytes) * slots;
  const double test_bytes = static_cast<double>(eval_batch) * static_cast<double>(eval_sample_bytes) * slots;
  const double memory = host_memory().physical_bytes;
  if (memory > 0 && train_bytes + test_bytes > memory / 2) {
    char text[400];
    std::snprintf(text, sizeof text,
                  "the data loaders' batch buffers would take %.1f GiB (data.batch_size %lld, data.eval_batch_size "
                  "%lld, data.prefetch %lld: (prefetch + 1) batches each), more than half of this machine's %.1f "
                  "GiB of memory: lower data.prefetch or the batch sizes",
                  (train_bytes + test_bytes) / 1073741824.0, static_cast<long long>(d.batch_size),
                  static_cast<long long>(d.eval_batch_size), static_cast<long long>(d.prefetch),
                  memory / 1073741824.0);
    throw Error(text);
  }
}

// The data section's loader threads and buffers; +1 slot: the batch being trained on holds one.
DataLoaderOptions loader_options(const DataConfig& d, HostAllocator host_allocator) {
  DataLoaderOptions options;
  options.num_threads = static_cast<int>(d.loader_threads);
  options.prefetch = static_cast<int>(d.prefetch) + 1;
  options.host_allocator = std::move(host_allocator);
  return options;
}

// The training loader of a distributed run takes this rank's shard (disjoint across ranks each
// epoch) in batches of batch_size / world_size, or its fixed shards' batches one after another
// (NOTE [ Fixed shards ]); evaluation takes this rank's part in order.
std::unique_ptr<DataLoader> make_loader(const Dataset& dataset, const DataConfig& d, Device cpu, bool train,
                                        uint64_t seed, HostAllocator host_allocator, int rank, int world_size,
                                        const DataPlan& plan, bool fixed_shards) {
  const DataLoaderOptions options = loader_options(d, std::move(host_allocator));
  if (train && fixed_shards) {
    ShardedBatchSamplerOptions o;
    o.shards = plan.shards;
    o.first_shard = rank * plan.local_shards;
    o.shard_count = plan.local_shards;
    o.shard_batch = plan.per_shard_batch;
    o.shuffle = d.shuffle;
    o.seed = seed;
    o.drop_last = d.drop_last;
    return std::make_unique<DataLoader>(dataset, std::make_unique<ShardedBatchSampler>(dataset.size(), o), cpu,
                                        options);
  }
  std::unique_ptr<Sampler> sampler;
  if (train && world_size > 1) {
    DistributedSamplerOptions o;
    o.rank = rank;
    o.world_size = world_size;
    o.shuffle = d.shuffle;
    o.seed = seed;
    o.drop_last = d.drop_last;
    sampler = std::make_unique<DistributedSampler>(dataset.size(), o);
  } else if (train && d.shuffle) {
    sampler = std::make_unique<RandomSampler>(dataset.size(), seed);
  } else {
    sampler = std::make_unique<SequentialSampler>(dataset.size(), rank, world_size);
  }
  const int64_t batch = train ? d.batch_size / world_size : d.eval_batch_size;
  auto batches = std::make_unique<FixedSizeBatchSampler>(std::move(sampler), batch, train && d.drop_last);
  return std::make_unique<DataLoader>(dataset, std::move(batches), cpu, options);
}

TokenBatchingOptions token_batching_options(const Config& config, const text::MlmDataset& train, int world_size) {
  const DataConfig& d = config.data;
  TokenBatchingOptions o;
  o.batching = d.batching == "max_tokens" ? TokenBatching::MaxTokens : TokenBatching::Fixed;
  o.batch_size = d.batch_size;
  o.max_tokens = d.max_tokens;
  o.max_seq_length = d.max_seq_length > 0 ? d.max_seq_length : train.max_seq_length();
  o.size_multiple = d.size_multiple;
  o.pad_to_multiple = std::min(d.pad_to_multiple, o.max_seq_length);
  o.balance = d.balance == "sort_and_deal" ? RankBalance::SortAndDeal : RankBalance::None;
  o.packing = d.packing == "greedy" ? SequencePacking::Greedy : SequencePacking::None;
  o.world_size = world_size;
  o.shuffle = d.shuffle;
  o.seed = config.run.seed;
  o.drop_last = d.drop_last;
  return o;
}

// Errors about one sequence (too long for data.max_seq_length or data.max_tokens) say which shard
// holds it.
std::function<std::string(int64_t)> sequence_namer(const text::MlmDataset& data) {
  return [&data](int64_t sequence) {
    const auto [shard, index] = data.text().locate(sequence);
    return detail::concat("sequence ", sequence, " (sequence ", index, " of the shard ", data.text().shard(shard).dir(),
                          ")");
  };
}

// Text runs: the token-batching plan decides the steps (NOTE [ Token batching ]); the same
// preflight as plan_data otherwise. The samplers are built here, where a plan error can name the
// data it came from.
DataPlan plan_text_data(const Config& config, const text::MlmDataset& train, const text::MlmDataset& eval, int rank,
                        int world_size, std::unique_ptr<TokenBatchSampler>& train_batches,
                        std::unique_ptr<TokenBatchSampler>& eval_batches) {
  const DataConfig& d = config.data;
  DP_CHECK(config.distributed.shards == 0, "distributed.shards is for image batches; a text run balances its "
           "token batches over the ranks itself (data.balance): leave distributed.shards at 0");
  DP_CHECK(!config.distributed.sync_batchnorm, "distributed.sync_batchnorm: BERT has no BatchNorm; turn it off");
  // Masking picks only ordinary tokens ([CLS], [SEP], [PAD], [MASK] are never targets): text of
  // special tokens alone would train on nothing and evaluate nothing.
  for (const text::MlmDataset* set : {&train, &eval})
    DP_CHECK(set->total_targets() > 0, set->description(), ": ", set->size(), " sequence",
             set->size() == 1 ? "" : "s", " but no token to predict: masking chooses among ordinary tokens, and ",
             "these hold only [CLS], [SEP], [PAD] and [MASK] (data.mask_prob ", d.mask_prob, ")");
  TokenBatchingOptions o = token_batching_options(config, train, world_size);
  o.name_sequence = sequence_namer(train);
  const std::vector<int32_t> lengths(train.lengths().begin(), train.lengths().end());
  try {
    train_batches = std::make_unique<TokenBatchSampler>(lengths, train.targets(), o, rank);
  } catch (const Error& e) {
    throw Error(detail::concat(train.description(), ": ", e.what()));
  }
  TokenBatchingOptions eval_options = o;
  eval_options.batch_size = d.eval_batch_size;
  eval_options.name_sequence = sequence_namer(eval);
  try {
    eval_batches = TokenBatchSampler::for_evaluation(eval.lengths(), eval_options, rank, world_size);
  } catch (const Error& e) {
    throw Error(detail::concat(eval.description(), ": ", e.what()));
  }
  DataPlan plan;
  plan.token_batching = true;
  plan.shards = world_size;
  plan.local_shards = 1;
  plan.shard_size = train.size() / world_size;
  plan.per_rank_batch = plan.per_shard_batch = train_batches->max_batch_size();
  plan.steps_per_epoch = train_batches->num_batches(0);
  plan.total_steps = checked_product(config.run.epochs, plan.steps_per_epoch, "run.epochs x steps per epoch");
  if (config.run.max_steps > 0) plan.total_steps = std::min(plan.total_steps, config.run.max_steps);
  check_loader_memory(config, train_batches->max_batch_size(), train.sample_bytes(), eval_batches->max_batch_size(),
                      eval.sample_bytes());
  return plan;
}

std::unique_ptr<LrSchedule> make_schedule(const Config& config, int64_t steps_per_epoch) {
  const ScheduleConfig& s = config.schedule;
  LrScheduleOptions o;
  o.base_lr = config.optimizer.lr;
  const ScheduleSteps steps = schedule_steps(config, steps_per_epoch);
  o.total_steps = steps.total;
  o.warmup_steps = steps.warmup;
  o.gamma = s.gamma;
  o.min_lr = s.min_lr;
  o.power = s.power;
  for (double e : s.step_epochs) o.milestones.push_back(static_cast<int64_t>(std::llround(e * steps_per_epoch)));
  return make_lr_schedule(s.name, o);
}

}  // namespace

namespace {

// NOTE [ Pre-allocation ]
// Token batches change shape every step, and the largest may come late in an epoch. Before
// training, one forward and backward runs on the epoch's largest rank batch (most padded tokens),
// in the run's precision: a batch that does not fit the device fails now, not hours in, the
// caching allocators keep blocks of the peak's sizes, and the GPU batch uploader's buffers are
// sized for the largest batch once (every later batch is a view of their beginning). Nothing of
// it stays: it runs before the reducer and the optimiser exist, its gradients are dropped and the
// generator is put back where it was (dropout draws from it), so a run trains the same with or
// without it.
double preallocate(TrainingRun& r, const Config& config) {
  const auto start = std::chrono::steady_clock::now();
  const RankBatch& largest = r.token_batches()->largest_batch();
  RowBatch rows;
  rows.samples = largest.sequences;
  rows.row_starts = largest.row_starts;
  rows.padded_length = largest.padded_length;
  const Batch host = r.train_set().fill_rows(rows, 0, r.train_set().allocate_batch(largest.num_rows(), r.cpu));
  const uint64_t seed = r.generator.seed(), offset = r.generator.offset();
  {
    // Twice: the uploader's two device slots then both hold the largest batch's size.
    r.train_uploader->upload(host);
    const Batch batch = r.train_uploader->upload(host);
    Tensor loss;
    {
      AutocastGuard amp(autocast_dtype_of(config.run.precision));
      loss = r.objective->training_loss(*r.model, batch);
    }
    loss.backward();
    r.train_uploader->release_host_buffers();
  }
  r.model->zero_grad(/*set_to_none=*/true);
  r.generator.set_state(seed, offset);
  r.device.backend().synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Every rank must train on the same data: each holds the whole dataset (the sampler gives it its
// shard), so a node whose copy is partial or different — node-local staging that was cut short, a
// relative data.root read from another working directory — would train the model on other
// samples or labels without a word, or fail epochs later as a desync. Sizes and content digests
// (Dataset::content_digest) are compared once, before anything else runs on them.
void check_same_data_on_every_rank(const Dataset& train, const Dataset& eval, ProcessGroup& group, Device cpu) {
  const int64_t n = group.size();
  const Tensor mine = from_vector<int64_t>({train.size(), static_cast<int64_t>(train.content_digest()), eval.size(),
                                            static_cast<int64_t>(eval.content_digest())},
                                           {4}, cpu);
  Tensor all = empty({n * 4}, kInt64, cpu);
  group.all_gather(mine, all)->wait();
  const std::vector<int64_t> v = all.to_vector<int64_t>();
  for (const auto& [split, offset, data] : {std::tuple{"training", 0, &train}, std::tuple{"evaluation", 2, &eval}}) {
    std::string differ;
    for (int64_t r = 1; r < n; ++r) {
      const int64_t size = v[r * 4 + offset], digest = v[r * 4 + offset + 1];
      if (size == v[offset] && digest == v[offset + 1]) continue;
      differ += detail::concat(differ.empty() ? "" : ", ", "rank ", r, " has ", size, " samples",
                               size == v[offset] ? " with other contents" : "");
    }
    DP_CHECK(differ.empty(), "the ranks loaded different ", split, " data: rank 0 has ", v[offset], " samples, ",
             differ, " (this rank read ", data->description(), "): every rank must read the same files; check ",
             "data.root on each node (a partial copy, or a relative path read from another working directory)");
  }
}

}  // namespace

const TokenBatchSampler* TrainingRun::token_batches() const {
  return train_loader ? dynamic_cast<const TokenBatchSampler*>(&train_loader->batch_sampler()) : nullptr;
}

std::unique_ptr<TrainingRun> build_run(const Config& config, Runtime& runtime, const RunWorld& world, DataUse use) {
  auto run = std::make_unique<TrainingRun>();
  TrainingRun& r = *run;

  // ---- World ----
  r.device = runtime.device(world.device.empty() ? config.run.device : world.device);
  r.cpu = runtime.cpu();
  r.group = world.group;
  r.world_size = world.group ? world.group->size() : 1;
  r.rank = world.group ? world.group->rank() : 0;
  r.nodes = world.nodes;
  if (r.world_size > 1) {
    DP_CHECK(r.device.is_cpu() || (world.device_group != nullptr && world.device_group->size() == r.world_size),
             "train: ", r.device.str(), " on ", r.world_size, " ranks needs a process group for GPU tensors (NCCL) "
             "over the same ranks");
  }
  r.model_group = r.device.is_cpu() ? world.group : world.device_group;
  if (r.world_size > 1 && config.distributed.sync_batchnorm) r.batch_norm_group = world.batch_norm_group;

  // ---- Data ----
  r.data = make_datasets(config, use);  // data.dataset (launch/datasets.h)
  if (r.group && r.world_size > 1) check_same_data_on_every_rank(r.train_set(), r.eval_set(), *r.group, r.cpu);
  r.train_uploader = make_batch_uploader(r.device, r.cpu);
  r.eval_uploader = make_batch_uploader(r.device, r.cpu);
  if (r.data.train_text) {  // NOTE [ Token batching ]
    DP_CHECK(config.model.name == "bert", "data.dataset text trains a masked language model: set model.name: bert "
             "(got ", config.model.name, ")");
    std::unique_ptr<TokenBatchSampler> train_batches, eval_batches;
    r.plan = plan_text_data(config, *r.data.train_text, *r.data.eval_text, r.rank, r.world_size, train_batches,
                            eval_batches);
    r.train_loader = std::make_unique<DataLoader>(r.train_set(), std::move(train_batches), r.cpu,
                                                  loader_options(config.data, r.train_uploader->host_allocator()));
    r.eval_loader = std::make_unique<DataLoader>(r.eval_set(), std::move(eval_batches), r.cpu,
                                                 loader_options(config.data, r.eval_uploader->host_allocator()));
  } else {
    DP_CHECK(config.model.name != "bert", "model.name bert is a masked language model: it trains on data.dataset: "
             "text (got ", config.data.dataset, ")");
    // (Text runs: the token-batching plan checks data.batch_size, which only fixed batching uses.)
    DP_CHECK(r.world_size == 1 || config.data.batch_size % r.world_size == 0, "data.batch_size ",
             config.data.batch_size, " is the global batch and must be divisible by the world size ", r.world_size,
             " (each rank takes batch_size / world_size); choose a multiple of ", r.world_size);
    r.plan = plan_data(config, *r.data.train_images, r.eval_set(), r.world_size);  // NOTE [ Preflight ]
    r.fixed_shards = config.distributed.shards > 0;
    r.train_loader = make_loader(r.train_set(), config.data, r.cpu, /*train=*/true, config.run.seed,
                                 r.train_uploader->host_allocator(), r.rank, r.world_size, r.plan, r.fixed_shards);
    r.eval_loader = make_loader(r.eval_set(), config.data, r.cpu, /*train=*/false, config.run.seed,
                                r.eval_uploader->host_allocator(), r.rank, r.world_size, r.plan, r.fixed_shards);
  }
  check_cuda_graphs(config, r);  // NOTE [ CUDA graphs ]: refused early where a step cannot be captured
  // NOTE [ A schedule that does not fit its run ] (config.cpp): refused here, before the model is
  // built; the warnings are kept for announce() to say.
  r.schedule_warnings = check_schedule_fits(config, r.plan.steps_per_epoch);
  // No begin_epoch here: the loader would start reading training data before run_start.
  const int64_t steps_per_epoch = r.train_loader->num_batches();
  DP_CHECK(steps_per_epoch == r.plan.steps_per_epoch, "train: the loader plans ", steps_per_epoch,
           " steps per epoch, the preflight ", r.plan.steps_per_epoch);

  // ---- Model ----
  // The model keeps a reference to it (Dropout draws from it every step): it lives in the run.
  r.generator = Generator(config.run.seed);
  ModelSpec spec;
  spec.name = config.model.name;
  spec.num_classes = config.model.num_classes;
  if (r.data.train_images) {
    spec.in_channels = r.data.train_images->input_shape()[0];
    spec.image_size = r.data.train_images->input_shape()[1];
    DP_CHECK(spec.name != "small_cnn" || spec.image_size % 4 == 0, "model.name small_cnn takes training images whose ",
             "side is a multiple of 4 (its two 2x2 poolings), but they are ", shape_str(r.data.train_images->input_shape()),
             " (data.image_size ", config.data.image_size, ")");
    // Found here, not at the first evaluation after a whole epoch of training.
    const Shape train_shape = r.data.train_images->input_shape(), eval_shape = r.data.eval_images->input_shape();
    const auto [first, last] = model_image_sides(spec.name, spec.image_size);
    DP_CHECK(eval_shape[1] >= first && eval_shape[1] <= last, "model.name ",
             spec.name, " sizes its layers for the training images (", shape_str(train_shape), ", data.image_size ",
             config.data.image_size, ") and takes evaluation images of side ",
             first == last ? std::to_string(first) : std::to_string(first) + " to " + std::to_string(last),
             " only, but they are ", shape_str(eval_shape), " (data.eval_image_size ", config.data.eval_image_size,
             "): set data.eval_image_size to ", train_shape[1], ", or choose a resnet (its global pooling takes ",
             "any size)");
  } else {
    spec.bert_size = config.model.size;
    spec.vocab_size = static_cast<int64_t>(r.data.train_text->vocab().size());
    spec.max_seq_length = r.token_batches()->options().max_seq_length;
  }
  spec.mlp_hidden = config.model.mlp_hidden;
  spec.dropout = config.model.dropout;
  spec.zero_init_residual = config.model.zero_init_residual;
  r.model = build_model(spec, r.device, r.generator);
  // buffer_sync average averages each rank's own running statistics; the shards one rank trains
  // share one set (only a step's first shard updates it), so S shards on fewer than S ranks would
  // not compute what S ranks compute (a model without such buffers has nothing to average).
  bool floating_buffers = false;
  for (const auto& [name, t] : r.model->named_buffers()) floating_buffers = floating_buffers || is_floating(t.dtype());
  DP_CHECK(!r.fixed_shards || !floating_buffers || config.distributed.buffer_sync != "average" ||
               config.distributed.shards == r.world_size,
           "distributed.shards ", config.distributed.shards, " on ", r.world_size, " rank",
           r.world_size == 1 ? "" : "s", " with distributed.buffer_sync average: shards on one rank share one ",
           "set of BatchNorm running statistics, so the average over the ranks would not be the one ",
           config.distributed.shards, " ranks take. Use buffer_sync broadcast (rank 0's statistics, which the ",
           "shards reproduce exactly), or as many ranks as shards");
  if (!config.model.init_from.empty())
    load_model_weights(*r.model, config.model.init_from, r.cpu, "model.init_from", spec.name,
                       detail::concat("model ", spec.name, " with ", spec.num_classes, " classes"));
  r.model->train();
  if (r.data.train_text) {
    r.objective = std::make_unique<MaskedLmObjective>(config.data.packing == "greedy", r.world_size);
    // (Not for evaluation alone: it trains nothing, and its batches are the evaluation loader's.)
    if (use == DataUse::Training) r.preallocation_seconds = preallocate(r, config);  // NOTE [ Pre-allocation ]
  } else {
    // run.channels_last: auto is channels-last on a GPU, NCHW on the CPU (NOTE [ Channels-last ];
    // measured in bench/RESULTS.md).
    const bool channels_last =
        config.run.channels_last == "true" || (config.run.channels_last == "auto" && r.device.is_cuda());
    r.input_format = channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
    r.objective = std::make_unique<ClassificationObjective>(*r.data.train_images, *r.data.eval_images,
                                                            config.loss.label_smoothing, r.input_format,
                                                            spec.num_classes);
  }
  if (r.world_size > 1) {
    broadcast_model_from_rank0(*r.model, *r.model_group);
    ReducerOptions ro;
    ro.first_bucket_bytes = static_cast<int64_t>(config.distributed.first_bucket_mb * (1 << 20));
    ro.bucket_bytes = static_cast<int64_t>(config.distributed.bucket_mb * (1 << 20));
    ro.find_unused_parameters = config.distributed.find_unused_parameters;
    if (config.distributed.grad_dtype == "bf16") ro.wire_dtype = kBFloat16;
    ro.average = !r.fixed_shards;  // NOTE [ Fixed shards ]: summed, then divided by the shard count
    r.reducer = std::make_unique<Reducer>(r.model->named_parameters(), *r.model_group, ro);
    if (config.distributed.sync_batchnorm) {
      DP_CHECK(world.batch_norm_group != nullptr && world.batch_norm_group->size() == r.world_size,
               "train: distributed.sync_batchnorm needs a process group for BatchNorm statistics over the same ",
               r.world_size, " ranks");
      r.synchronised_batchnorms = convert_sync_batchnorm(*r.model, *world.batch_norm_group);
    }
  }
  if (r.fixed_shards)
    for (const auto& [name, module] : r.model->named_modules())
      if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(module)) r.batch_norms.push_back(bn);
  r.parameters = r.model->parameters();
  for (const Tensor& p : r.parameters) r.num_parameters += p.numel();

  // ---- Optimiser, schedule, loss scaling, objective ----
  // The model's group: Shampoo gathers its roots over it, from its state on the parameters' device
  // (NCCL for a GPU's; the MPI group takes only CPU tensors).
  r.optimizer = make_optimizer(config.optimizer, r.model->named_parameters(),
                               OptimizerContext{r.model_group, static_cast<int>(config.run.threads)});
  r.schedule = make_schedule(config, steps_per_epoch);
  // NOTE [ Schedule clock ] (optim/lr_schedule.h): on the device, advanced only by applied steps
  // when schedule.count_skipped_steps is false.
  r.clock = std::make_unique<ScheduleClock>(*r.schedule, config.run.epochs * steps_per_epoch, r.device,
                                            config.schedule.count_skipped_steps);
  // NOTE [ Loss scaling on the device ] (optim/grad_scaler.h): on for fp16 unless loss_scale.enabled
  // says otherwise, off for fp32 and bf16 unless it says so.
  GradScalerOptions scaler_options;
  scaler_options.enabled = config.loss_scaling();
  scaler_options.init_scale = config.loss_scale.init_scale;
  scaler_options.growth_factor = config.loss_scale.growth_factor;
  scaler_options.backoff_factor = config.loss_scale.backoff_factor;
  scaler_options.growth_interval = config.loss_scale.growth_interval;
  r.scaler = std::make_unique<GradScaler>(r.device, scaler_options);
  // run.precision: forward and loss under autocast (NOTE [ Autocast policy ]); backward follows
  // the dtypes the forward chose; parameters, gradients and optimiser state stay float32.
  r.autocast = autocast_dtype_of(config.run.precision);
  r.clip_grad_norm = config.optimizer.clip_grad_norm;
  return run;
}

namespace {

// NOTE [ Fixed shards ]: the running statistics of all but a step's first shard are dropped.
class FrozenRunningStats {
 public:
  explicit FrozenRunningStats(const std::vector<nn::BatchNorm2d*>& layers) : layers_(layers) { set(true); }
  ~FrozenRunningStats() { set(false); }
  FrozenRunningStats(const FrozenRunningStats&) = delete;
  FrozenRunningStats& operator=(const FrozenRunningStats&) = delete;

 private:
  void set(bool frozen) {
    for (nn::BatchNorm2d* bn : layers_) bn->set_running_stats_frozen(frozen);
  }
  const std::vector<nn::BatchNorm2d*>& layers_;
};

}  // namespace

StepStats train_step(TrainingRun& run, const Batch& batch, StepProfiler& profiler) {
  StepStats stats;
  const Tensor& lr = run.clock->next_lr();  // on the device: NOTE [ Schedule clock ]
  // NOTE [ Fixed shards ]: this rank's shards one after another, each a forward and a backward.
  const int64_t micro_batches = run.plan.local_shards;
  DP_CHECK(batch.size() % micro_batches == 0, "train_step: a batch of ", batch.size(), " samples does not split into ",
           micro_batches, " equal shards");
  const int64_t shard_samples = batch.size() / micro_batches;
  for (int64_t m = 0; m < micro_batches; ++m) {
    const Batch shard = micro_batches == 1 ? batch : batch.slice(m * shard_samples, shard_samples);
    std::optional<FrozenRunningStats> frozen;
    if (m > 0) frozen.emplace(run.batch_norms);
    profiler.begin(Phase::Forward);
    Tensor loss;
    {
      AutocastGuard amp(run.autocast);
      loss = run.objective->training_loss(*run.model, shard);
    }
    profiler.begin(Phase::Backward);
    if (run.reducer) run.reducer->prepare_for_backward(/*sync=*/m == micro_batches - 1);
    run.scaler->scale(loss).backward();
    stats.loss = m == 0 ? loss.detach() : add(stats.loss, loss.detach());
  }
  if (micro_batches > 1) stats.loss = mul(stats.loss, 1.0 / static_cast<double>(micro_batches));
  if (run.reducer) {
    profiler.begin(Phase::Comm);
    stats.comm = run.reducer->finish();
  }
  if (run.fixed_shards && run.plan.shards > 1) {
    // Summed over the shards (accumulation, then a summing all-reduce): the mean of the shards'
    // mean losses' gradients, one division on every rank alike.
    NoGradGuard no_grad;
    for (Tensor& p : run.parameters)
      if (p.grad().defined()) {
        Tensor g = p.grad();
        g.device().backend().binary_scalar(BinaryOp::Div, g, static_cast<double>(run.plan.shards), g);
      }
  }
  profiler.begin(Phase::Optimizer);
  // Loss scaling: the gradients are unscaled after the all-reduce (every rank then takes the
  // same decision) and before clipping (which sees the true norm). A gradient overflow (a
  // non-finite value found by the scaler, or a non-finite global norm when clipping) sets the
  // step's found_inf and the optimiser's kernels skip the update; the schedule clock and the
  // skip counters read the same verdict, all on the device (NOTE [ Device-resident optimiser
  // step ] in optim/optimizer.h). Skips are counted, and read between steps.
  GradScaler& scaler = *run.scaler;
  scaler.unscale(run.parameters);
  if (run.clip_grad_norm > 0) clip_grad_norm_on_device_(run.parameters, run.clip_grad_norm, scaler.found_inf());
  scaler.step(*run.optimizer, lr);
  run.clock->step_done(scaler.found_inf());
  scaler.update();
  run.optimizer->zero_grad(/*set_to_none=*/true);
  profiler.end();
  profiler.step_done();
  return stats;
}

std::vector<double> sum_over_ranks(ProcessGroup* group, std::vector<double> values, Device cpu) {
  if (!group || group->size() == 1) return values;
  Tensor t = from_vector<double>(values, {static_cast<int64_t>(values.size())}, cpu);
  group->all_reduce(t, CollectiveReduce::Sum)->wait();
  return t.to_vector<double>();
}

Evaluation evaluate(TrainingRun& run) {
  NoGradGuard no_grad;
  AutocastGuard amp(run.autocast);
  run.model->eval();
  run.eval_loader->begin_epoch(0);
  Tensor loss_sum = zeros({}, kFloat64, run.device), correct = zeros({}, kFloat64, run.device);
  Tensor count = zeros({}, kFloat64, run.device);
  Tensor correct_top5;  // NOTE [ Top-5 accuracy ]: defined once a batch counts it
  while (std::optional<LoadedBatch> batch = run.eval_loader->next()) {
    const Batch on_device = run.eval_uploader->upload(*batch);
    const EvalSums sums = run.objective->eval_sums(*run.model, on_device);
    loss_sum = add(loss_sum, sums.loss);
    correct = add(correct, sums.correct);
    count = add(count, sums.count);
    if (sums.correct_top5.defined()) correct_top5 = correct_top5.defined() ? add(correct_top5, sums.correct_top5)
                                                                             : sums.correct_top5;
    run.eval_uploader->release_host_buffers();
  }
  run.model->train();
  // Every rank sends the same number of values (a rank whose shard had no batch sends a 0 for
  // top-5); whether top-5 is counted depends on the model alone, the same on every rank.
  const bool top5 = run.objective->counts_top5();
  std::vector<double> values{loss_sum.item<double>(), correct.item<double>(), count.item<double>()};
  if (top5) values.push_back(correct_top5.defined() ? correct_top5.item<double>() : 0.0);
  const std::vector<double> totals = sum_over_ranks(run.group, values, run.cpu);
  DP_CHECK(totals[2] > 0, "evaluation: the test set gave nothing to score (no batch, or no predicted token)");
  Evaluation e{totals[0] / totals[2], totals[1] / totals[2], totals[2]};
  if (top5) e.accuracy_top5 = totals[3] / totals[2];
  return e;
}

FileReport add_file_reports_over_ranks(const TrainingRun& run, const FileReport& mine) {
  const std::vector<double> totals = sum_over_ranks(
      run.group, {static_cast<double>(mine.skipped), static_cast<double>(mine.warned)}, run.cpu);
  FileReport all = mine;
  all.skipped = static_cast<int64_t>(totals[0]);
  all.warned = static_cast<int64_t>(totals[1]);
  return all;
}

uint64_t model_digest(nn::Module& model, Device cpu) {
  Fnv1a digest;
  auto add = [&](const auto& named) {
    for (const auto& [n, t] : named) {
      const Tensor host = t.to(cpu).contiguous();
      digest.text(n).bytes(host.raw_data(), host.nbytes());
    }
  };
  add(model.named_parameters());
  add(model.named_buffers());
  return digest.value();
}

std::map<std::string, std::string> load_model_weights(nn::Module& model, const std::string& path, Device cpu,
                                                      const std::string& origin, const std::string& model_name,
                                                      const std::string& model_description) {
  std::vector<nn::NamedTensor> weights;
  std::map<std::string, std::string> metadata;
  try {
    weights = load_tensors(path, cpu, &metadata);
  } catch (const Error& e) {
    throw Error(detail::concat(origin, ": ", e.what()));  // names the file and the problem
  }
  // dptrain's own files name their model: another one is said as such, not as a list of tensors.
  const auto format = metadata.find("format"), named = metadata.find("model");
  DP_CHECK(format == metadata.end() || format->second != "dptrain model weights" || named == metadata.end() ||
               named->second == model_name,
           origin, ": ", path, " holds the weights of model ", named == metadata.end() ? "" : named->second,
           ", not of ", model_description);
  try {
    model.load_state_dict(weights);
  } catch (const Error& e) {
    throw Error(detail::concat(origin, ": ", path, " does not fit ", model_description, ": ", e.what()));
  }
  // safetensors has no checksum of its own; dptrain's weights files carry the model's digest
  // (save_final_weights in trainer.cpp), so a flipped bit or an edited tensor is found here.
  const auto recorded = metadata.find("model_digest");
  if (recorded == metadata.end()) return metadata;  // torchvision's, Hugging Face's, an older dptrain's
  const std::string loaded = hex_digest(model_digest(model, cpu));
  DP_CHECK(recorded->second == loaded, origin, ": ", path, " records model digest ", recorded->second,
           " but its tensors give ", loaded, ": the file changed after dptrain wrote it (damaged, or edited); "
           "use another copy of the weights");
  return metadata;
}

std::map<std::string, std::string> model_file_metadata(const Config& config, const TrainingRun& run, int64_t steps,
                                                       uint64_t digest) {
  std::map<std::string, std::string> m = {{"format", "dptrain model weights"},
                                          {"model", config.model.name},
                                          {"num_classes", std::to_string(config.model.num_classes)},
                                          {"steps", std::to_string(steps)},
                                          {"model_digest", hex_digest(digest)}};
  if (run.data.train_images) {
    const std::vector<std::string> names = run.data.train_images->class_names();
    if (!names.empty()) m["classes"] = nlohmann::json(names).dump();
  }
  return m;
}

void check_weights_classes(const std::map<std::string, std::string>& metadata, const ClassificationDataset& data,
                           const std::string& origin, const std::string& path) {
  const auto recorded = metadata.find("classes");
  const std::vector<std::string> ours = data.class_names();
  if (recorded == metadata.end() || ours.empty()) return;
  std::vector<std::string> theirs;
  try {
    theirs = nlohmann::json::parse(recorded->second).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat(origin, ": ", path, ": its metadata entry `classes` is not a JSON list of names: ",
                               e.what()));
  }
  if (theirs == ours) return;
  size_t i = 0;
  while (i < theirs.size() && i < ours.size() && theirs[i] == ours[i]) ++i;
  const std::string difference =
      i < theirs.size() && i < ours.size()
          ? detail::concat("label ", i, " is '", theirs[i], "' in training and '", ours[i], "' here")
          : detail::concat("training had ", theirs.size(), " classes, this set has ", ours.size(), " (the first only ",
                           theirs.size() > ours.size() ? "in training" : "here", ": '",
                           theirs.size() > ours.size() ? theirs[i] : ours[i], "')");
  throw Error(detail::concat(origin, ": ", path, " records the classes it was trained on, and ", data.description(),
                             " has others: ", difference, "; every label would mean another class. Evaluate on a ",
                             "set with the training set's class folders (data.root, data.eval_root)"));
}

}  // namespace dp
