#include "runtime/data/loader.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/autograd/grad_mode.h"

namespace dp {
namespace {

enum class SlotState : uint8_t { Free, Filling, Ready, Lent };

struct Slot {
  Batch buffers;  // capacity-sized, allocated once
  Batch current;  // the batch it holds: `buffers`, or views of their first samples
  SlotState state = SlotState::Free;
  std::exception_ptr error;  // set instead of data when filling failed
};

}  // namespace

// Everything the filling threads, the consumer and lent batches share; see NOTE [ Loader ring ].
// Lent batches hold it by shared_ptr so that they may outlive the DataLoader. The mutex guards
// the slot states and counters; a slot's data belongs to whoever moved it to Filling or Lent.
class LoaderState {
 public:
  LoaderState(const Dataset& dataset, int64_t capacity, Device device, int num_slots,
              const HostAllocator& host_allocator)
      : dataset(dataset), capacity(capacity), slots(static_cast<size_t>(num_slots)) {
    for (Slot& slot : slots) {
      slot.buffers = dataset.allocate_batch(capacity, device);
      for (const auto& [name, t] : slot.buffers.tensors())
        DP_CHECK(t.size(0) == capacity && t.device().is_cpu(), "DataLoader: the dataset allocated its batch tensor '",
                 name, "' as ", t.str(), ", expected ", capacity, " samples on the CPU");
      DP_CHECK(!slot.buffers.tensors().empty(), "DataLoader: the dataset allocated a batch without tensors");
      if (host_allocator)  // same shapes in the caller's memory (pinned, for GPU uploads)
        for (auto& [name, t] : slot.buffers.tensors()) t = host_allocator(t.shape(), t.dtype());
      slot.current = slot.buffers;
    }
  }

  int slot_of(int64_t batch) const { return static_cast<int>(batch % static_cast<int64_t>(slots.size())); }
  bool can_claim() const {
    return next_to_fill < plan.num_batches() && slots[slot_of(next_to_fill)].state == SlotState::Free;
  }

  void release(int slot) {
    {
      std::lock_guard lock(mutex);
      slots[slot].state = SlotState::Free;
    }
    slot_freed.notify_all();
  }

  // Writes batch `batch` of the plan into slot `s` (owned by the caller: state Filling); a
  // failure is kept in the slot for next() to rethrow.
  void fill(int s, int64_t batch) {
    Slot& slot = slots[s];
    try {
      NoGradGuard no_grad;
      if (plan.has_rows()) {  // token batching: the dataset shapes the batch
        slot.current = dataset.fill_rows(plan.row_batch(batch), epoch, slot.buffers);
      } else {
        const std::span<const int64_t> indices = plan.batch(batch);
        const int64_t size = static_cast<int64_t>(indices.size());
        if (slot.current.size() != size) slot.current = size == capacity ? slot.buffers : slot.buffers.prefix(size);
        dataset.fill_batch(indices, epoch, slot.current);
      }
      slot.current.mark_rewritten();
      slot.error = nullptr;
    } catch (const std::exception& e) {
      slot.error = std::make_exception_ptr(
          Error(detail::concat("DataLoader: loading batch ", batch + 1, " of epoch ", epoch + 1,  // as the console counts
                               " failed: ", e.what())));
    } catch (...) {
      slot.error = std::current_exception();
    }
  }

  const Dataset& dataset;
  const int64_t capacity;
  std::mutex mutex;
  std::condition_variable slot_freed;   // filling threads wait: a slot freed, a new epoch, stop
  std::condition_variable slot_filled;  // next() and begin_epoch wait: a fill ended
  std::vector<Slot> slots;
  // Read outside the lock by fills; replaced only by begin_epoch once no fill is in flight.
  EpochPlan plan;
  int64_t epoch = -1;
  int64_t next_to_fill = 0;  // first batch no thread has claimed
  int64_t next_to_hand = 0;  // next batch next() returns
  int fills_in_flight = 0;
  bool stopping = false;
  std::exception_ptr failure;  // rethrown by every next() until begin_epoch
};

LoadedBatch::LoadedBatch(LoadedBatch&& other) noexcept
    : Batch(std::move(other)),
      state_(std::move(other.state_)),
      slot_(other.slot_),
      index_(other.index_),
      samples_(other.samples_),
      step_samples_(other.step_samples_) {}

LoadedBatch& LoadedBatch::operator=(LoadedBatch&& other) noexcept {
  if (this != &other) {
    release();
    Batch::operator=(std::move(other));
    state_ = std::move(other.state_);
    slot_ = other.slot_;
    index_ = other.index_;
    samples_ = other.samples_;
    step_samples_ = other.step_samples_;
  }
  return *this;
}

void LoadedBatch::release() noexcept {
  if (!state_) return;
  tensors().clear();
  state_->release(slot_);
  state_.reset();
}

DataLoader::DataLoader(const Dataset& dataset, std::unique_ptr<BatchSampler> batches, Device device,
                       const DataLoaderOptions& options)
    : batches_(std::move(batches)) {
  DP_CHECK(batches_ != nullptr, "DataLoader: the batch sampler is null");
  DP_CHECK(device.valid() && device.is_cpu(), "DataLoader: batches are assembled in CPU memory, got device ",
           device.valid() ? device.str() : "(invalid)", "; copy each batch to the GPU with .to(device)");
  DP_CHECK(options.num_threads >= 0, "DataLoader: num_threads must be >= 0 (0 = load on the caller's thread), got ",
           options.num_threads);
  DP_CHECK(options.prefetch >= 1, "DataLoader: prefetch (batch buffers) must be >= 1, got ", options.prefetch);
  state_ = std::make_shared<LoaderState>(dataset, batches_->max_batch_size(), device, options.prefetch,
                                         options.host_allocator);
  try {
    for (int t = 0; t < options.num_threads; ++t) {
      threads_.emplace_back([this] { run_filling_thread(); });
      const std::string name = "dp-loader-" + std::to_string(t);  // shown by top -H, gdb, perf
      pthread_setname_np(threads_.back().native_handle(), name.c_str());
    }
  } catch (...) {
    stop_threads();
    throw;
  }
}

DataLoader::~DataLoader() { stop_threads(); }

void DataLoader::stop_threads() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->slot_freed.notify_all();
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
}

void DataLoader::run_filling_thread() {
  LoaderState& st = *state_;
  std::unique_lock lock(st.mutex);
  for (;;) {
    st.slot_freed.wait(lock, [&] { return st.stopping || st.can_claim(); });
    if (st.stopping) return;
    const int64_t batch = st.next_to_fill++;
    const int s = st.slot_of(batch);
    st.slots[s].state = SlotState::Filling;
    ++st.fills_in_flight;
    lock.unlock();
    st.fill(s, batch);
    lock.lock();
    st.slots[s].state = SlotState::Ready;
    --st.fills_in_flight;
    st.slot_filled.notify_all();
  }
}

int64_t DataLoader::num_batches() const {
  return epoch_ >= 0 ? state_->plan.num_batches() : batches_->num_batches(0);
}

void DataLoader::begin_epoch(int64_t epoch, int64_t first_batch) {
  LoaderState& st = *state_;
  EpochPlan plan = batches_->plan(epoch);
  DP_CHECK(first_batch >= 0 && first_batch <= plan.num_batches(), "DataLoader: epoch ", epoch, " has ",
           plan.num_batches(), " batches; cannot start at batch ", first_batch);
  plan.check_rows();
  for (int64_t b = 0; b < plan.num_batches(); ++b) {
    DP_CHECK(plan.batch_rows(b) <= st.capacity, "DataLoader: batch ", b, " of epoch ", epoch, " has ",
             plan.batch_rows(b), plan.has_rows() ? " rows" : " samples", " but the batch sampler's max_batch_size is ",
             st.capacity);
  }
  {
    std::unique_lock lock(st.mutex);
    st.next_to_fill = st.plan.num_batches();  // no new claims; let the fills in flight end
    st.slot_filled.wait(lock, [&] { return st.fills_in_flight == 0; });
    st.plan = std::move(plan);
    st.epoch = epoch;
    st.next_to_fill = st.next_to_hand = first_batch;
    st.failure = nullptr;
    for (Slot& slot : st.slots) {
      if (slot.state != SlotState::Lent) slot.state = SlotState::Free;  // a lent one frees on release
    }
  }
  st.slot_freed.notify_all();
  epoch_ = epoch;
  last_wait_seconds_ = epoch_wait_seconds_ = 0.0;
}

std::optional<LoadedBatch> DataLoader::next() {
  DP_CHECK(epoch_ >= 0, "DataLoader::next: call begin_epoch(epoch) before the first next()");
  LoaderState& st = *state_;
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(st.mutex);
  if (st.failure) std::rethrow_exception(st.failure);
  last_wait_seconds_ = 0.0;
  if (st.next_to_hand >= st.plan.num_batches()) return std::nullopt;

  const int64_t batch = st.next_to_hand;
  const int s = st.slot_of(batch);
  Slot& slot = st.slots[s];
  const int64_t prefetch = static_cast<int64_t>(st.slots.size());
  DP_CHECK(slot.state != SlotState::Lent, "DataLoader::next: batch ", batch, " needs the buffer still held by batch ",
           batch - prefetch, "; release earlier batches first (at most prefetch - 1 = ", prefetch - 1,
           " may be held while calling next()) or raise prefetch");
  if (threads_.empty()) {  // synchronous: fill on this thread
    slot.state = SlotState::Filling;
    lock.unlock();
    st.fill(s, batch);
    lock.lock();
    slot.state = SlotState::Ready;
  } else {
    st.slot_filled.wait(lock, [&] { return slot.state == SlotState::Ready; });
  }
  last_wait_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  epoch_wait_seconds_ += last_wait_seconds_;

  if (slot.error) {
    st.failure = std::exchange(slot.error, nullptr);
    slot.state = SlotState::Free;
    lock.unlock();
    st.slot_freed.notify_all();
    std::rethrow_exception(st.failure);
  }
  slot.state = SlotState::Lent;
  ++st.next_to_hand;
  const Batch lent = slot.current;
  const auto samples = static_cast<int64_t>(st.plan.batch(batch).size());
  const int64_t step_samples = st.plan.step_samples.empty() ? 0 : st.plan.step_samples[batch];
  lock.unlock();
  return LoadedBatch(lent, state_, s, batch, samples, step_samples);
}

}  // namespace dp
