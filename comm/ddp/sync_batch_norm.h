// Synchronised batch normalisation (torch.nn.SyncBatchNorm) for data-parallel training: every
// rank normalises its shard with the mean and variance of the GLOBAL batch, so W ranks compute
// the forward and backward of one process over the whole batch, up to rounding.
//
// NOTE [ Dedicated group for batch statistics ]
// Pass a process group used for nothing but these statistics: the trainer creates a second
// MpiProcessGroup (or NcclProcessGroup) for them. The collectives here are small and blocking —
// forward waits for its all-gather, backward for its all-reduce — and a group runs its
// collectives in submission order (NOTE [ Process group contract ]). On the reducer's group a
// BN statistics all-reduce issued during backward would queue behind the 25 MB gradient buckets
// already launched, stalling backward until they finish. Every rank must run the same training
// forwards and backwards of the converted model (they issue collectives), and the group must
// outlive the model's use of it. On GPUs that makes two NCCL communicators busy on one GPU, whose
// launches NCCL must order (NOTE [ Several communicators on one GPU ] in
// comm/nccl/nccl_process_group.h).
//
// NOTE [ SyncBatchNorm as a fused op ]
// sync_batch_norm is one autograd node with a hand-written backward, not a composition of
// differentiable ops around a differentiable all-reduce. Why:
// - Accuracy: local statistics come from the runtime's reductions (double accumulation on the
//   CPU), are combined across ranks in float64, and y is computed by the backend's batch_norm
//   kernel with those statistics, so y matches the single-process kernel up to the float32
//   rounding of mean and variance.
// - Memory: a composition keeps x − mean, its square, x̂ and their products alive for backward
//   in every BN layer (53 in ResNet-50); the fused node saves x, mean and invstd only.
// - Communication: forward is one all-gather of (count, mean, M2) per rank, combined on every
//   rank in rank order (Chan's formula: mean = Σ n_r·mean_r / N, M2 = Σ M2_r + n_r·(mean_r −
//   mean)², so no Σx² cancellation), which gives all ranks the same bits whatever order MPI
//   would sum in; backward is one all-reduce (sum) of Σdy and Σdy·x̂ per channel.
// Gradient convention (as PyTorch): weight/bias get this rank's local Σdy·x̂ and Σdy, which the
// DDP reducer averages like any other parameter gradient; dx on rank q is ∂(Σ_r L_r)/∂x_q, the
// derivative of the SUM of the ranks' losses (the statistics couple every rank's input to every
// rank's loss). With equal shards and L_r the mean over the shard, the reducer's averaged
// parameter gradients then equal those of one process minimising the mean over the global batch.
#pragma once

#include <cstdint>
#include <string>

#include "comm/process_group.h"
#include "runtime/nn/batchnorm.h"
#include "runtime/nn/module.h"

namespace dp {

// Training-mode batch_norm over x [N, C, H, W] (this rank's shard, N ≥ 1) with the statistics of
// the global batch over `group`: the contract of dp::batch_norm(..., training = true, ...)
// otherwise (weight/bias/running stats [C] optional, float32 statistics for float16/bfloat16
// inputs, running stats updated in place with the unbiased global variance). `name` (such as
// "layer1.0.bn1") only labels errors. A group of size 1 is exactly dp::batch_norm, no
// collectives.
Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps, ProcessGroup& group,
                       const std::string& name = "");

// The nn::BatchNormSynchronizer that runs sync_batch_norm over `group` (which must outlive it).
class SyncBatchNormSynchronizer final : public nn::BatchNormSynchronizer {
 public:
  SyncBatchNormSynchronizer(ProcessGroup& group, std::string name) : group_(group), name_(std::move(name)) {}
  Tensor batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                             const Tensor& running_var, double momentum, double eps) override;

 private:
  ProcessGroup& group_;
  std::string name_;
};

// Makes every nn::BatchNorm2d of `model` synchronise its batch statistics over `group` (a
// dedicated group: NOTE [ Dedicated group for batch statistics ]), as
// torch.nn.SyncBatchNorm.convert_sync_batchnorm, keeping parameter and buffer names. Returns the
// number of layers converted. Call it on every rank, before training.
int convert_sync_batchnorm(nn::Module& model, ProcessGroup& group);

}  // namespace dp
