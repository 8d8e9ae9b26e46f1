#include "launch/graphed_step.h"

#include <exception>
#include <functional>
#include <utility>

#include "runtime/core/host_sync.h"
#include "runtime/ops/creation.h"

namespace dp {

void check_cuda_graphs(const Config& config, const TrainingRun& run) {
  if (!config.run.cuda_graphs) return;
  DP_CHECK(config.optimizer.name != "shampoo", "run.cuda_graphs: shampoo computes its inverse roots on the host from ",
           "each step's statistics, which a CUDA graph cannot hold; use sgd, adamw, lars or lamb, or set ",
           "run.cuda_graphs: false");
  DP_CHECK(run.world_size == 1 || !config.distributed.find_unused_parameters, "run.cuda_graphs with ",
           "distributed.find_unused_parameters: a replay repeats the captured step, so the parameters left without a ",
           "gradient would be those of that one step for the rest of the run (PyTorch's DDP needs a static graph for ",
           "the same reason). Set distributed.find_unused_parameters: false, or run.cuda_graphs: false");
  DP_CHECK(!run.plan.token_batching || config.data.batching == "fixed", "run.cuda_graphs: data.batching ",
           config.data.batching, " gives a new batch shape nearly every step, and each shape needs a graph of its own; ",
           "use data.batching: fixed, or run.cuda_graphs: false");
  DP_CHECK(run.device.backend().supports_capture(), "run.cuda_graphs: CUDA graphs need a GPU ",
           "(run.device: cuda); this run trains on ", run.device.str(), ". Set run.cuda_graphs: false");
  for (const ProcessGroup* group : {run.model_group, run.batch_norm_group}) {
    DP_CHECK(run.world_size == 1 || group == nullptr || group->captures_collectives(), "run.cuda_graphs: the ",
             group->backend_name(), " process group cannot record its collectives into a CUDA graph; data-parallel ",
             "graphs need NCCL (NOTE [ Collectives in CUDA graphs ]). Set run.cuda_graphs: false");
  }
}

GraphedSteps::~GraphedSteps() = default;

StepStats GraphedSteps::step(const Batch& batch, StepProfiler& profiler) {
  const std::string signature = batch.str();
  for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
    if (it->signature != signature) continue;
    graphs_.splice(graphs_.begin(), graphs_, it);  // most recently used first
    return replay(graphs_.front(), batch, profiler);
  }
  // Shapes that never settle (a rare last batch) must not fill the table.
  if (eager_counts_.size() > 64) eager_counts_.clear();
  int64_t& seen = eager_counts_[signature];
  // The reducer re-plans its buckets once, early: a graph holds their addresses, so it waits.
  const bool buckets_settled = !run_.reducer || run_.reducer->settled();
  if (seen < warmup_steps_ || !buckets_settled) {
    ++seen;
    return train_step(run_, batch, profiler);
  }
  eager_counts_.erase(signature);
  profiler.begin(Phase::Graph);  // ends the data phase: the capture's time is the step's, not the loader's
  return replay(capture(signature, batch), batch, profiler);
}

GraphedSteps::Captured& GraphedSteps::capture(const std::string& signature, const Batch& batch) {
  Backend& backend = run_.device.backend();
  if (graphs_.size() >= kMaxGraphs) graphs_.pop_back();  // the least recently used
  Captured c;
  c.signature = signature;
  for (const auto& [name, t] : batch.tensors()) c.inputs.set(name, empty(t.shape(), t.dtype(), run_.device));
  // The step as train_step() queues it, recorded instead of run. Device markers cannot be read
  // back from a capture: the captured step is timed by the host, and its replays as one phase.
  StepProfiler untimed;
  const std::string region = "the training step captured as a CUDA graph (run.cuda_graphs)";
  if (!random_base_.defined()) random_base_ = zeros({1}, kInt64, run_.device);
  // The collectives each group records into the graph: its log's sequence numbers advance by them
  // (NOTE [ Collectives in CUDA graphs ]).
  std::vector<std::pair<ProcessGroup*, uint64_t>> logged;
  if (run_.world_size > 1)
    for (ProcessGroup* group : {run_.model_group, run_.batch_norm_group})
      if (group != nullptr) logged.emplace_back(group, group->log().next_sequence());
  {
    const ForbidHostSyncGuard no_host_reads(region.c_str());
    Generator& gen = run_.generator;
    gen.begin_relative(random_base_);  // NOTE [ Random numbers in CUDA graphs ]
    try {
      c.graph = capture_graph(backend, [&] { c.loss = train_step(run_, c.inputs, untimed).loss; });
    } catch (const std::exception& e) {
      gen.end_relative();
      throw Error(detail::concat("run.cuda_graphs: the training step for a batch of ", signature, " could not be ",
                                 "captured as a CUDA graph: ", e.what(), ". Set run.cuda_graphs: false to train ",
                                 "without graphs"));
    }
    c.random_draws = gen.end_relative();
  }
  for (const auto& [group, first] : logged) {
    const auto count = static_cast<int64_t>(group->log().next_sequence() - first);
    if (count > 0) c.collectives.emplace_back(group, count);
  }
  ++captures_;
  last_graph_nodes_ = c.graph->node_count();
  graphs_.push_front(std::move(c));
  return graphs_.front();
}

StepStats GraphedSteps::replay(Captured& captured, const Batch& batch, StepProfiler& profiler) {
  Backend& backend = run_.device.backend();
  profiler.begin(Phase::Graph);
  const auto& from = batch.tensors();
  const auto& to = captured.inputs.tensors();
  for (size_t i = 0; i < from.size(); ++i) backend.copy(from[i].second, to[i].second);
  if (captured.random_draws > 0) {
    // The counters eager training would draw next (NOTE [ Random numbers in CUDA graphs ]); queued
    // before the replay on the same stream. A double holds every offset below 2^53 exactly.
    Generator& gen = run_.generator;
    DP_CHECK(gen.offset() + captured.random_draws < (uint64_t{1} << 53), "run.cuda_graphs: the random stream's ",
             "offset passed 2^53 counters");
    backend.fill(random_base_, static_cast<double>(gen.reserve(captured.random_draws)));
  }
  // A replay that holds collectives is queued through their groups, which watch it (NOTE
  // [ Collectives in CUDA graphs ]): nested, one bracket per group around the one launch.
  std::function<void()> launch = [&captured] { captured.graph->replay(); };
  for (const auto& [group, count] : captured.collectives)
    launch = [group = group, count = count, inner = std::move(launch)] { group->replay_graph(inner, count)->wait(); };
  launch();
  StepStats stats;
  stats.loss = captured.loss.clone();  // the next replay rewrites the graph's own
  profiler.end();
  profiler.step_done();
  ++replays_;
  return stats;
}

}  // namespace dp
