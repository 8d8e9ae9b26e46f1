// The DDP reducer: averages gradients over a process group while backward is still running.
//
// NOTE [ Buckets ]
// Parameters are packed into flat buckets, one dtype and device per bucket: the first holds at
// most `first_bucket_bytes` (small, so the first all-reduce starts as early as possible), the
// others `bucket_bytes` (PyTorch DDP's 1 MiB / 25 MiB). A parameter's .grad is a view into its
// bucket (gradient-as-bucket-view), so the all-reduce runs on the gradients themselves with no
// copy in either direction. After zero_grad(set_to_none) the view is also the parameter's
// gradient home (NOTE [ Gradient homes ] in runtime/autograd/engine.h): the next backward writes
// the gradient straight into the bucket — the kernel that computes a weight's gradient writes it
// there — instead of allocating it and leaving the reducer a copy, which PyTorch DDP makes. The
// ready hook still copies a gradient that arrives elsewhere (a .grad set by hand) and re-points
// .grad. Each gradient starts on a kGradAlignBytes boundary of its bucket.
//
// The first plan takes parameters in reverse registration order: backward reaches late layers
// first. During the first synchronised backward the reducer records the order in which gradients
// actually became ready; at the next prepare_for_backward() rank 0's order is broadcast and the
// buckets are re-planned once from it, so every rank packs identically.
//
// NOTE [ Launch order ]
// A bucket is ready when the grad-ready hook (runtime/autograd/engine.h) has fired for all its
// parameters. Buckets are all-reduced strictly in index order on every rank — a ready bucket
// waits for all lower-indexed ones — because every rank must issue the same collectives in the
// same sequence (NOTE [ Process group contract ]), whatever order its own backward produced.
//
// NOTE [ Compressed gradient communication ]
// With ReducerOptions::wire_dtype (distributed.grad_dtype: bf16) a floating bucket of another
// dtype travels in the wire dtype, with PyTorch's bf16_compress_hook semantics: the bucket is
// cast (round to nearest even), divided by the world size in the wire dtype, summed by the
// all-reduce, and cast back into the float32 gradients when finish() has waited for it. Half the
// bytes on the network; every rank still receives the same bits, so replicas stay identical.
// The gradients keep their float32 views and master weights stay float32.
//
// NOTE [ Communication timed on the device ]
// With the MPI backend the collectives run on a host thread, and ReducerStepStats times them with
// the host's clock: from the first bucket's launch to the last one's completion (comm_ms), and the
// part finish() waited for (exposed_ms). With NCCL, finish() only makes the compute stream wait
// (NOTE [ NCCL streams and waits ]), so those host figures measure nothing. There the exposed part
// is the step profiler's comm phase (device markers around the compute stream's wait, NOTE [ Step
// timing on a GPU ] in launch/step_profiler.h), and the communication time is the same span on the
// device's clock: from the moment the first bucket's gradients were ready on the compute stream
// (its collective's `ready` event) to the end of the last bucket's all-reduce on the communication
// stream (its `done`), read by Work::device_ms_since_ready_of. The reducer keeps each step's first
// and last Work until the device has run them and reads them then, usually a step later, so the
// host never waits for it (take_device_comm_time). A captured step (CUDA graphs) has no times of
// its own; a replay's communication is inside its graph phase.
//
// A parameter that gets no gradient in a step never fires its hook. finish() then either treats
// its gradient as zero (find_unused_parameters) or fails naming it: otherwise its bucket would
// never launch on this rank while the others wait for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "runtime/nn/module.h"

namespace dp {

// Alignment of each gradient inside its bucket (NOTE [ Buckets ]): a CUDA allocation's.
inline constexpr int64_t kGradAlignBytes = 256;

struct ReducerOptions {
  int64_t first_bucket_bytes = int64_t(1) << 20;
  int64_t bucket_bytes = int64_t(25) << 20;
  bool find_unused_parameters = false;  // zero-fill gradients that backward did not reach
  bool replan_from_ready_order = true;  // re-plan the buckets once from the observed order
  // true: the gradients are averaged over the ranks; false: summed, and the caller divides
  // (NOTE [ Fixed shards ] in launch/training_run.h divides by the shard count instead).
  bool average = true;
  // Floating buckets of another dtype travel in this one (NOTE [ Compressed gradient
  // communication ]); unset: as they are.
  std::optional<DType> wire_dtype;
};

// What one synchronised step's communication cost, as the reducer on this rank saw it.
struct ReducerStepStats {
  double comm_ms = 0;      // launch of the first bucket to completion of the last
  double exposed_ms = 0;   // spent in finish() waiting: communication backward did not hide
  double hidden_fraction = 0;  // 1 − exposed / comm (1 when comm_ms is 0)
  int last_bucket = -1;    // the bucket whose all-reduce completed last
  int buckets = 0;
  int unused_parameters = 0;
};

// Communication spans measured on the device (NOTE [ Communication timed on the device ]).
struct DeviceCommTime {
  double comm_ms = 0;   // summed over `steps`
  int64_t steps = 0;    // synchronised steps whose span was read
  int64_t untimed = 0;  // synchronised steps without one (captured, failed, or dropped unread)
};

class Reducer {
 public:
  struct Bucket {
    Tensor buffer;                 // flat, contiguous; the parameters' gradients are views of it
    std::vector<size_t> params;    // indices into the reducer's parameter list, in packing order
    std::vector<int64_t> offsets;  // element offset of each in `buffer`
    Tensor wire;                   // `buffer` as it travels, when compressed (else undefined)
  };

  // `params` are the model's trainable parameters (named_parameters()); the reducer registers a
  // grad-ready hook on each. `group` must outlive the reducer.
  Reducer(std::vector<nn::NamedTensor> params, ProcessGroup& group, ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward. sync = false for the micro-steps of gradient accumulation that must
  // not communicate: gradients then just accumulate into the buckets.
  void prepare_for_backward(bool sync = true);
  // After a synchronised backward: launches what remains (see the NOTE on unused parameters),
  // waits for every bucket and leaves the averaged gradients in .grad.
  ReducerStepStats finish();

  // Groups that time collectives on the device (NCCL): the communication spans of the
  // synchronised steps the device has finished since the last call — usually up to the step
  // before the current one; it never waits (after a device synchronisation: every step). Nothing
  // with groups timed by the host's clock, whose figures are finish()'s.
  DeviceCommTime take_device_comm_time();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<nn::NamedTensor>& parameters() const { return params_; }
  // Re-plans done so far (0 or 1).
  int replans() const { return replans_; }
  // The buckets will not move again: re-planned from the ready order, or told not to. A CUDA
  // graph captures the buckets' addresses, so a step is captured only once this holds (NOTE
  // [ Collectives in CUDA graphs ] in comm/nccl/nccl_process_group.h).
  bool settled() const { return replans_ > 0 || !options_.replan_from_ready_order; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Slot {  // where parameter i lives
    int bucket = -1;
    int64_t offset = 0;
    Tensor view;  // its gradient inside the bucket
  };

  // initial: the constructor's plan, which makes every .grad its view; a re-plan keeps an unset
  // .grad unset (zero_grad(set_to_none) before it) and moves a set one into the new buckets.
  void plan(const std::vector<size_t>& order, bool initial);
  void on_gradient_ready(size_t index);
  void launch_ready_buckets();
  void replan_from_rank0_order();

  std::vector<nn::NamedTensor> params_;
  ProcessGroup& group_;
  ReducerOptions options_;
  std::shared_ptr<bool> alive_;  // hooks outlive the reducer: they check this first

  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;

  // Per backward.
  bool sync_ = false;
  bool in_backward_ = false;
  std::vector<char> param_ready_;
  std::vector<int> pending_in_bucket_;
  size_t next_to_launch_ = 0;
  std::vector<WorkPtr> work_;
  std::vector<Clock::time_point> launched_at_;

  // NOTE [ Communication timed on the device ]: each synchronised step's first and last Work,
  // until the device has run them; at most kMaxUntimedSteps (older ones are dropped unread).
  static constexpr size_t kMaxUntimedSteps = 64;
  struct UntimedStep {
    WorkPtr first, last;
  };
  std::deque<UntimedStep> untimed_steps_;
  DeviceCommTime device_time_;  // read, or given up on, since the last take_device_comm_time()

  std::vector<size_t> ready_order_;  // recorded during the first synchronised backward
  bool order_recorded_ = false;
  int replans_ = 0;
};

// A 64-bit hash of the parameters' and buffers' names, shapes and dtypes, in order. Equal on
// every rank iff they built the same model (up to collisions).
uint64_t model_structure_hash(const nn::Module& model);

// Broadcasts rank 0's parameters and buffers to every rank, after checking (one all-gather of
// the structure hash) that all ranks built the same model; a dp::Error naming the ranks that
// differ otherwise.
void broadcast_model_from_rank0(nn::Module& model, ProcessGroup& group);

// BatchNorm's running statistics differ across ranks (each saw its own shard). Before
// evaluation they are made equal: rank 0's copied everywhere, or floating-point buffers averaged
// (integer ones, such as num_batches_tracked, are taken from rank 0). (A checkpoint keeps rank
// 0's, or with averaging every rank's: gather_rank_buffers in launch/run_checkpoint.h.)
enum class BufferSync : uint8_t { Broadcast, Average };
void sync_buffers(nn::Module& model, ProcessGroup& group, BufferSync mode);

}  // namespace dp
