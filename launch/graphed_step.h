// Training steps replayed as CUDA graphs (run.cuda_graphs).
//
// NOTE [ CUDA graphs ]
// A GPU step is a few hundred to a few thousand kernel launches whose arguments do not change
// from step to step: everything a step decides (lr, loss scale, found_inf, step counts, clip
// factor) already lives on the device (NOTE [ Device-resident optimiser step ]). So after
// run.cuda_graph_warmup eager steps of a batch shape (they choose cuDNN algorithms and create the
// optimiser's state), one step is captured — forward, scaled backward, unscale and check,
// clipping, optimiser, scale update, schedule clock — and every later step of that shape copies
// its batch into the graph's static input tensors and replays the graph with one launch: no
// host-side op dispatch, no autograd bookkeeping, no per-kernel launch latency.
// - Shapes: graphs are kept per batch signature (names, shapes, dtypes), up to kMaxGraphs, the
//   least recently used dropped first; a shape seen fewer than warm-up times (an epoch's last,
//   smaller batch) just runs eagerly. All graphs share one private memory pool (NOTE [ Graph
//   memory ] in runtime/backend/cuda/cuda_backend.h): they replay one after another.
// - The loss a replay returns is a copy: the graph's own loss tensor is rewritten by the next
//   replay, and the divergence check keeps each step's loss.
// - The capture runs under the host-sync guard: a read of a device value inside the step ends the
//   run naming it, instead of an opaque invalidated capture.
// - Random numbers (dropout): the capture draws from the run's generator relative to a device
//   counter, which each replay sets to the generator's offset before it runs (NOTE [ Random
//   numbers in CUDA graphs ] in runtime/tensor/generator.h): replay k draws the masks eager
//   step k would have, so a graphed run keeps the eager run's random stream.
// - Data-parallel runs (NCCL): the reducer's hooks run during the capture as in an eager step,
//   and the all-reduces they submit — and SyncBatchNorm's all-gathers — are recorded into the
//   graph with their fork to the communication stream and their join (NOTE [ Collectives in CUDA
//   graphs ] in comm/nccl/nccl_process_group.h); each replay is queued through the groups, whose
//   watchdogs time it like a collective. With SyncBatchNorm the graph holds two communicators'
//   collectives on independent branches, which NCCL orders by their capture order (NOTE [ Several
//   communicators on one GPU ]). A step is captured only once the reducer's buckets have
//   settled (its one re-plan, in the second synchronised step), at the same step on every rank.
//   The reducer's host-clock communication figures come from the eager steps only: a replay's
//   communication is inside its "graph" phase.
// - Refused where a step cannot be one graph (check_cuda_graphs): the CPU (no graphs), Shampoo
//   (its roots are computed on the host from the step's statistics), find_unused_parameters in
//   data-parallel runs (the unused set would be frozen at the captured step), the MPI backend
//   (its collectives run on the host), and token batching by max_tokens (a new shape nearly
//   every step).
// - Timing: a replayed step is one "graph" phase of the step profile (device time).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch/config.h"
#include "launch/step_profiler.h"
#include "launch/training_run.h"

namespace dp {

// Throws dp::Error naming the config key when run.cuda_graphs is set and `run` cannot be captured
// (NOTE [ CUDA graphs ]); does nothing when it is not set.
void check_cuda_graphs(const Config& config, const TrainingRun& run);

class GraphedSteps {
 public:
  static constexpr size_t kMaxGraphs = 4;

  GraphedSteps(TrainingRun& run, int64_t warmup_steps) : run_(run), warmup_steps_(warmup_steps) {}
  ~GraphedSteps();
  GraphedSteps(const GraphedSteps&) = delete;
  GraphedSteps& operator=(const GraphedSteps&) = delete;

  // One training step on `batch` (on the device), as train_step() computes it: eagerly during the
  // warm-up of its shape, by a capture then a replay at the end of it, by a replay after.
  StepStats step(const Batch& batch, StepProfiler& profiler);

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  size_t graphs() const { return graphs_.size(); }
  // Nodes of the most recent capture (0 before one).
  size_t last_graph_nodes() const { return last_graph_nodes_; }

 private:
  struct Captured {
    std::string signature;
    Batch inputs;  // static: each step's batch is copied here before a replay
    Tensor loss;   // the graph's output, rewritten by each replay
    std::unique_ptr<DeviceGraph> graph;
    uint64_t random_draws = 0;  // generator counters one replay draws
    // Collectives recorded into the graph, per process group (NOTE [ Collectives in CUDA graphs ]).
    std::vector<std::pair<ProcessGroup*, int64_t>> collectives;
  };
  Captured& capture(const std::string& signature, const Batch& batch);
  StepStats replay(Captured& graph, const Batch& batch, StepProfiler& profiler);

  TrainingRun& run_;
  int64_t warmup_steps_;
  std::list<Captured> graphs_;               // most recently used first
  std::map<std::string, int64_t> eager_counts_;  // eager steps per signature not captured yet
  Tensor random_base_;  // int64 [1] on the device: the generator's offset for the next replay
  int64_t captures_ = 0, replays_ = 0;
  size_t last_graph_nodes_ = 0;
};

}  // namespace dp
