// Puts the batches a DataLoader lends (host memory) on the training device.
//
// NOTE [ Batch upload ]
// On the CPU a batch is trained on where the loader wrote it: upload() returns its tensors. On
// a GPU the loader writes into pinned host memory (host_allocator(), allocated once with the
// loader's slots), and upload() queues one asynchronous copy per tensor on a copy stream of
// its own into one of two device slots, then makes the compute stream wait for that copy with
// an event: kernels queued afterwards see the batch, and nothing waits on the host. Because the
// host runs ahead of the GPU, the copy of step n+1's batch overlaps step n's kernels. A device
// slot is rewritten only after the compute stream has passed the work queued before the
// upload that followed its last use (the step that trained on it, its backward included);
// the pinned source may be handed back to the loader once release_host_buffers() returns,
// which waits for the copy engine alone (microseconds), never for the compute stream.
#pragma once

#include <memory>

#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"

namespace dp {

class BatchUploader {
 public:
  virtual ~BatchUploader() = default;
  // Memory for the loader's batch buffers (empty: ordinary CPU memory).
  virtual HostAllocator host_allocator() const = 0;
  // The batch on the device; valid until the upload after next.
  virtual Batch upload(const Batch& host) = 0;
  // Returns once the last upload has read its host buffers (they may then be reused).
  virtual void release_host_buffers() = 0;
};

// For training on `device`; `cpu` is where loaders put batches.
std::unique_ptr<BatchUploader> make_batch_uploader(Device device, Device cpu);

}  // namespace dp
