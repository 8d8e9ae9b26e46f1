// DataLoader: assembles batches on background threads into a ring of buffers allocated once,
// and hands them out in the sampler's order.
//
// NOTE [ Loader ring ]
// There are `prefetch` slots; batch b of an epoch always goes to slot b % prefetch. A filling
// thread claims the next unclaimed batch once its slot is free, fills it outside the lock and
// marks it ready; next() waits for batch b's slot to be ready and lends it as a LoadedBatch,
// whose destruction frees the slot for batch b + prefetch. Nothing is allocated per batch in
// steady state (a batch smaller than the buffers, e.g. the last one, gets views made for it).
// The consumer may hold up to prefetch - 1 batches while asking for the next; holding all of them
// makes next() throw instead of waiting forever. A failure while filling batch b is rethrown by
// next() when it reaches batch b, and by every later next() until begin_epoch.
// A plan of rows (token batching, runtime/data/token_batching.h) is filled by Dataset::fill_rows,
// which returns views of the slot's buffers shaped [rows, padded_length]: capacity then counts rows.
// The threads touch no autograd state: filling runs under NoGradGuard (GradMode is
// thread-local), so even a Dataset that composes ops records no graph.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/data/dataset.h"
#include "runtime/data/sampler.h"

namespace dp {

// Allocates a contiguous CPU tensor in memory of the caller's choosing (pinned memory, for
// batches a GPU copies asynchronously: runtime/data/batch_uploader.h).
using HostAllocator = std::function<Tensor(const Shape& shape, DType dtype)>;

struct DataLoaderOptions {
  int num_threads = 2;  // background filling threads; 0 fills on the caller's thread in next()
  int prefetch = 4;     // batch buffers: how many batches may be ready or lent at once
  // Where the batch buffers live; empty: the dataset's own allocation (ordinary CPU memory).
  HostAllocator host_allocator;
};

class LoaderState;

// A batch lent by the DataLoader. Its tensors alias the loader's buffers and are valid until the
// LoadedBatch is destroyed or release()d, which returns the buffers; clone() what must outlive
// that. A LoadedBatch may outlive its DataLoader.
class LoadedBatch : public Batch {
 public:
  LoadedBatch(LoadedBatch&& other) noexcept;
  LoadedBatch& operator=(LoadedBatch&& other) noexcept;
  LoadedBatch(const LoadedBatch&) = delete;
  LoadedBatch& operator=(const LoadedBatch&) = delete;
  ~LoadedBatch() { release(); }

  int64_t index() const { return index_; }  // position in the epoch
  // The samples it holds: its size, or for a batch of rows the sequences in them (the plan's).
  int64_t samples() const { return samples_; }
  // The samples of this batch's whole step over all ranks when the plan knows them (batches of
  // rows: EpochPlan::step_samples), else 0.
  int64_t step_samples() const { return step_samples_; }
  // Returns the buffers to the loader now; the batch is then empty (no tensors).
  void release() noexcept;

 private:
  friend class DataLoader;
  LoadedBatch(const Batch& batch, std::shared_ptr<LoaderState> state, int slot, int64_t index, int64_t samples,
              int64_t step_samples)
      : Batch(batch),
        state_(std::move(state)),
        slot_(slot),
        index_(index),
        samples_(samples),
        step_samples_(step_samples) {}

  std::shared_ptr<LoaderState> state_;
  int slot_ = -1;
  int64_t index_ = -1;
  int64_t samples_ = 0;
  int64_t step_samples_ = 0;
};

class DataLoader {
 public:
  // `dataset` must outlive the loader; `device` is the CPU device the buffers live on.
  DataLoader(const Dataset& dataset, std::unique_ptr<BatchSampler> batches, Device device,
             const DataLoaderOptions& options = {});
  // Stops the threads after their current batch and joins them.
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Plans `epoch` (see NOTE [ Deterministic epochs ]) and starts filling its first batches;
  // discards whatever remained of the previous epoch. A resumed run starts at `first_batch`
  // (0..num_batches): the batches before it are neither read nor handed out.
  void begin_epoch(int64_t epoch, int64_t first_batch = 0);
  // The epoch's next batch in order, or nullopt once all were handed out.
  std::optional<LoadedBatch> next();

  int64_t epoch() const { return epoch_; }
  // Batches in the current epoch (epoch 0 before the first begin_epoch).
  int64_t num_batches() const;
  // Time the consumer spent blocked in next() waiting for data (the profiler's "data" phase):
  // in the latest call, and summed over the current epoch. With num_threads = 0 this is the
  // time spent filling.
  double last_wait_seconds() const { return last_wait_seconds_; }
  double epoch_wait_seconds() const { return epoch_wait_seconds_; }
  const BatchSampler& batch_sampler() const { return *batches_; }

 private:
  void run_filling_thread();
  void stop_threads();

  std::unique_ptr<BatchSampler> batches_;
  std::shared_ptr<LoaderState> state_;
  std::vector<std::thread> threads_;
  int64_t epoch_ = -1;
  double last_wait_seconds_ = 0.0;
  double epoch_wait_seconds_ = 0.0;
};

}  // namespace dp
