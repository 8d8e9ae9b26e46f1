// The GPU side of runtime/data/batch_uploader.h (NOTE [ Batch upload ]).
#pragma once

#include <memory>

#include "runtime/data/batch_uploader.h"

namespace dp::cuda {

// `device` is a CUDA device, `cpu` the device the loader's (pinned) buffers belong to.
std::unique_ptr<BatchUploader> make_cuda_batch_uploader(Device device, Device cpu);

}  // namespace dp::cuda
