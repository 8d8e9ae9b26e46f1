// Batch normalisation over NCHW, as torch.nn.BatchNorm2d (running statistics always tracked).
#pragma once

#include "runtime/nn/module.h"

namespace dp::nn {

class BatchNorm2d : public Module {
 public:
  // Parameters "weight" = 1, "bias" = 0 [C] (when affine); buffers "running_mean" = 0,
  // "running_var" = 1 [C] and "num_batches_tracked" (int64 scalar), as torch registers them.
  BatchNorm2d(int64_t num_features, Device device, double eps = 1e-5, double momentum = 0.1, bool affine = true,
              DType dtype = kFloat32);
  // x [N, C, H, W] → same shape. Training: batch statistics, running stats updated in place
  // (running = (1 - momentum)·running + momentum·batch, unbiased variance). Eval: running stats.
  Tensor forward(const Tensor& x) override;

  const int64_t num_features;
  const double eps, momentum;
  Tensor weight, bias;  // undefined when !affine
  Tensor running_mean, running_var, num_batches_tracked;

 private:
  // Host mirror of num_batches_tracked, written to the device buffer with a fill so counting a
  // batch never synchronises with the device. tracked_version_ is the buffer's version after
  // that fill: a different version means someone wrote the buffer (a checkpoint load, a
  // broadcast from rank 0), and the mirror is re-read once from the device.
  int64_t batches_tracked_ = 0;
  uint64_t tracked_version_ = 0;
};

}  // namespace dp::nn
