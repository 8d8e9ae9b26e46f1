// Batch normalisation over NCHW, as torch.nn.BatchNorm2d (running statistics always tracked).
#pragma once

#include <memory>

#include "runtime/nn/module.h"

namespace dp::nn {

// NOTE [ Synchronised batch statistics ]
// In data-parallel training each rank's BatchNorm2d sees only its shard of the batch, so plain
// batch statistics differ from the ones a single process would compute over the whole batch.
// A BatchNorm2d given a synchroniser hands its training-mode normalisation to it, which computes
// the statistics of the global batch (torch.nn.SyncBatchNorm; comm/ddp/sync_batch_norm.h
// implements it over a process group). The module keeps its parameters, buffers and names, so
// checkpoints and the DDP reducer see no difference; eval mode never calls the synchroniser
// (it normalises with the running statistics, no communication).
class BatchNormSynchronizer {
 public:
  virtual ~BatchNormSynchronizer() = default;
  // The contract of dp::batch_norm with training = true (runtime/ops/norm.h), over x [N, C, H, W],
  // but with mean and variance of the batch across all ranks: running stats updated in place.
  virtual Tensor batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, double momentum,
                                     double eps) = 0;
};

class BatchNorm2d : public Module {
 public:
  // Parameters "weight" = 1, "bias" = 0 [C] (when affine); buffers "running_mean" = 0,
  // "running_var" = 1 [C] and "num_batches_tracked" (int64 scalar), as torch registers them.
  BatchNorm2d(int64_t num_features, Device device, double eps = 1e-5, double momentum = 0.1, bool affine = true,
              DType dtype = kFloat32);
  // x [N, C, H, W] → same shape. Training: batch statistics, running stats updated in place
  // (running = (1 - momentum)·running + momentum·batch, unbiased variance). Eval: running stats.
  Tensor forward(const Tensor& x) override;
  // relu(forward(x) + residual) (residual undefined: relu(forward(x))), fused into the kernel that
  // writes the output (dp::batch_norm_add_relu); with a synchroniser, the composition.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  Tensor forward_relu(const Tensor& x) { return forward_add_relu(x, Tensor()); }

  // NOTE [ Synchronised batch statistics ]: training-mode forwards go through `sync` when set;
  // nullptr returns to per-process statistics.
  void set_synchronizer(std::shared_ptr<BatchNormSynchronizer> sync) { synchronizer_ = std::move(sync); }
  const std::shared_ptr<BatchNormSynchronizer>& synchronizer() const { return synchronizer_; }

  // While frozen, training-mode forwards still normalise with the batch statistics but leave
  // running_mean, running_var and num_batches_tracked as they are (NOTE [ Fixed shards ] in
  // launch/training_run.h: only a step's first shard updates them, as only rank 0's survive
  // the buffer broadcast of a distributed run).
  void set_running_stats_frozen(bool frozen) { running_stats_frozen_ = frozen; }
  bool running_stats_frozen() const { return running_stats_frozen_; }

  const int64_t num_features;
  const double eps, momentum;
  Tensor weight, bias;  // undefined when !affine
  Tensor running_mean, running_var, num_batches_tracked;

 private:
  // forward (fused = false) and forward_add_relu (fused = true).
  Tensor normalize(const Tensor& x, bool fused, const Tensor& residual);

  std::shared_ptr<BatchNormSynchronizer> synchronizer_;
  bool running_stats_frozen_ = false;
};

}  // namespace dp::nn
