#include "comm/ddp/reducer.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <sstream>
#include <utility>

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/host_sync.h"
#include "runtime/ops/creation.h"

namespace dp {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void hash_entries(Fnv1a& h, const std::vector<nn::NamedTensor>& entries) {
  h.word(entries.size());
  for (const auto& [name, t] : entries) {
    h.text(name).word(static_cast<uint64_t>(t.dtype())).word(static_cast<uint64_t>(t.dim()));
    for (int64_t d : t.shape()) h.word(static_cast<uint64_t>(d));
  }
}

}  // namespace

Reducer::Reducer(std::vector<nn::NamedTensor> params, ProcessGroup& group, ReducerOptions options)
    : params_(std::move(params)), group_(group), options_(options), alive_(std::make_shared<bool>(true)) {
  DP_CHECK(options_.first_bucket_bytes > 0 && options_.bucket_bytes > 0,
           "distributed: bucket sizes must be positive, got first ", options_.first_bucket_bytes, " and ",
           options_.bucket_bytes, " bytes");
  for (const auto& [name, p] : params_) {
    DP_CHECK(p.requires_grad(), "DDP: parameter ", name, " does not require a gradient");
    DP_CHECK(p.is_contiguous(), "DDP: parameter ", name, " is not contiguous");
  }
  // Reverse registration order: backward produces the last layers' gradients first.
  std::vector<size_t> order(params_.size());
  std::iota(order.rbegin(), order.rend(), size_t(0));
  plan(order, /*initial=*/true);
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].second.register_grad_ready_hook([alive = std::weak_ptr<bool>(alive_), this, i](Tensor&) {
      if (alive.lock()) on_gradient_ready(i);
    });
  }
}

Reducer::~Reducer() {
  alive_.reset();
  for (auto& [name, p] : params_) p.set_grad_home(Tensor());  // the buckets go with us
  for (WorkPtr& w : work_) {
    if (!w) continue;
    try {
      w->wait();  // the collective writes into our buckets: let it finish first
    } catch (const Error&) {
    }
  }
}

void Reducer::plan(const std::vector<size_t>& order, bool initial) {
  NoGradGuard no_grad;
  std::vector<Bucket> buckets;
  std::vector<Slot> slots(params_.size());
  // Packing: a new bucket when the current one would overflow its limit (the first bucket's is
  // small) or the dtype or device changes. Every gradient starts on a kGradAlignBytes boundary
  // of its bucket, as a fresh allocation would: kernels that write it in place (NOTE [ Gradient
  // homes ]) and the optimiser's vector loads see the alignment they would see without DDP. The
  // gaps stay zero (all-reduced as zeros).
  std::vector<int64_t> bucket_elements, bucket_bytes;
  for (size_t index : order) {
    const Tensor& p = params_[index].second;
    const int64_t element = static_cast<int64_t>(p.element_size());
    const int64_t align = std::max<int64_t>(1, kGradAlignBytes / element);
    const int64_t padded = (p.numel() + align - 1) / align * align;
    const int64_t bytes = padded * element;
    bool fresh = buckets.empty();
    if (!fresh) {
      const Tensor& first = params_[buckets.back().params.front()].second;
      const int64_t limit = buckets.size() == 1 ? options_.first_bucket_bytes : options_.bucket_bytes;
      fresh = bucket_bytes.back() + bytes > limit || first.dtype() != p.dtype() || first.device() != p.device();
    }
    if (fresh) {
      buckets.emplace_back();
      bucket_elements.push_back(0);
      bucket_bytes.push_back(0);
    }
    Bucket& b = buckets.back();
    b.params.push_back(index);
    b.offsets.push_back(bucket_elements.back());
    slots[index].bucket = static_cast<int>(buckets.size() - 1);
    slots[index].offset = bucket_elements.back();
    bucket_elements.back() += padded;
    bucket_bytes.back() += bytes;
  }
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    Bucket& b = buckets[bi];
    const Tensor& first = params_[b.params.front()].second;
    b.buffer = zeros({bucket_elements[bi]}, first.dtype(), first.device());
    if (options_.wire_dtype && is_floating(first.dtype()) && first.dtype() != *options_.wire_dtype)
      b.wire = empty({bucket_elements[bi]}, *options_.wire_dtype, first.device());
    for (size_t k = 0; k < b.params.size(); ++k) {
      const size_t index = b.params[k];
      Tensor& p = params_[index].second;
      Slot& slot = slots[index];
      slot.view = b.buffer.narrow(0, b.offsets[k], p.numel()).view(p.shape());
      // Keep what has accumulated so far (a re-plan happens between steps).
      if (Tensor g = p.grad(); g.defined()) {
        slot.view.copy_(g);
        p.set_grad(slot.view);
      } else if (initial) {
        p.set_grad(slot.view);
      }
      p.set_grad_home(slot.view);  // later steps' backward writes it here (NOTE [ Gradient homes ])
    }
  }
  buckets_ = std::move(buckets);
  slots_ = std::move(slots);
  pending_in_bucket_.assign(buckets_.size(), 0);
  work_.assign(buckets_.size(), nullptr);
  launched_at_.assign(buckets_.size(), Clock::time_point());
}

void Reducer::prepare_for_backward(bool sync) {
  DP_CHECK(!in_backward_ || !sync_, "DDP: prepare_for_backward() called again before finish() of a synchronised step");
  if (sync && order_recorded_ && replans_ == 0 && options_.replan_from_ready_order) replan_from_rank0_order();
  sync_ = sync;
  in_backward_ = true;
  param_ready_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_in_bucket_[b] = static_cast<int>(buckets_[b].params.size());
  next_to_launch_ = 0;
  std::fill(work_.begin(), work_.end(), nullptr);
  if (sync && !order_recorded_) ready_order_.clear();
}

void Reducer::on_gradient_ready(size_t index) {
  Tensor& p = params_[index].second;
  Slot& slot = slots_[index];
  Tensor g = p.grad();
  if (!g.defined()) {  // the ops gave it no gradient (the hook fires regardless): a zero one
    NoGradGuard no_grad;
    slot.view.zero_();
    p.set_grad(slot.view);
  } else if (g.impl_ptr() != slot.view.impl_ptr()) {  // a fresh gradient: move it into the bucket
    NoGradGuard no_grad;
    slot.view.copy_(g);
    p.set_grad(slot.view);
  }
  if (!in_backward_ || !sync_) return;  // accumulation micro-step, or a backward DDP was not told of
  DP_CHECK(!param_ready_[index], "DDP: the gradient of ", params_[index].first,
           " became ready twice in one backward (a parameter used in two backward passes of one step "
           "needs one backward per step)");
  param_ready_[index] = 1;
  if (!order_recorded_) ready_order_.push_back(index);
  if (--pending_in_bucket_[slot.bucket] == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  while (next_to_launch_ < buckets_.size() && pending_in_bucket_[next_to_launch_] == 0) {
    const size_t b = next_to_launch_++;
    launched_at_[b] = Clock::now();
    Bucket& bucket = buckets_[b];
    if (!bucket.wire.defined()) {
      work_[b] = group_.all_reduce(bucket.buffer, options_.average ? CollectiveReduce::Average : CollectiveReduce::Sum,
                                   static_cast<int64_t>(b));
      continue;
    }
    // NOTE [ Compressed gradient communication ]: cast, divide, sum (cast back in finish()).
    NoGradGuard no_grad;
    bucket.wire.copy_(bucket.buffer);
    if (options_.average)
      bucket.wire.device().backend().binary_scalar(BinaryOp::Div, bucket.wire, group_.size(), bucket.wire);
    work_[b] = group_.all_reduce(bucket.wire, CollectiveReduce::Sum, static_cast<int64_t>(b));
  }
}

ReducerStepStats Reducer::finish() {
  DP_CHECK(in_backward_ && sync_, "DDP: finish() without a synchronised prepare_for_backward()");
  const Clock::time_point backward_done = Clock::now();
  ReducerStepStats stats;
  stats.buckets = static_cast<int>(buckets_.size());
  // Parameters backward did not reach.
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!param_ready_[i]) unused.push_back(params_[i].first);
  if (!unused.empty()) {
    if (!options_.find_unused_parameters) {
      in_backward_ = false;
      std::ostringstream names;
      for (size_t i = 0; i < unused.size() && i < 10; ++i) names << (i ? ", " : "") << unused[i];
      if (unused.size() > 10) names << ", ... (" << unused.size() << " in all)";
      throw Error(detail::concat("DDP: these parameters got no gradient in this step: ", names.str(),
                                 ". Set distributed.find_unused_parameters: true if the model leaves some "
                                 "parameters out of some steps."));
    }
    NoGradGuard no_grad;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (param_ready_[i]) continue;
      Slot& slot = slots_[i];
      Tensor g = params_[i].second.grad();
      if (!g.defined() || g.impl_ptr() != slot.view.impl_ptr()) slot.view.zero_();
      // Else: keep what accumulation micro-steps left in the view.
      params_[i].second.set_grad(slot.view);
      param_ready_[i] = 1;
      --pending_in_bucket_[slot.bucket];
    }
    stats.unused_parameters = static_cast<int>(unused.size());
    launch_ready_buckets();
  }
  if (!order_recorded_) order_recorded_ = true;
  DP_ASSERT(next_to_launch_ == buckets_.size());
  // Wait in launch order; the last to complete is the one whose wait still blocked last.
  Clock::time_point last_done = backward_done;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const bool was_done = work_[b]->is_completed();
    work_[b]->wait();
    if (!was_done) {
      last_done = Clock::now();
      stats.last_bucket = static_cast<int>(b);
    }
    if (buckets_[b].wire.defined()) {
      NoGradGuard no_grad;
      buckets_[b].buffer.copy_(buckets_[b].wire);
    }
  }
  if (stats.last_bucket < 0) stats.last_bucket = static_cast<int>(buckets_.size()) - 1;
  const Clock::time_point end = Clock::now();
  in_backward_ = false;
  if (group_.times_on_device() && !buckets_.empty()) {  // NOTE [ Communication timed on the device ]
    if (work_.front()->captured()) {
      ++device_time_.untimed;
    } else {
      untimed_steps_.push_back({work_.front(), work_.back()});
      if (untimed_steps_.size() > kMaxUntimedSteps) {
        untimed_steps_.pop_front();
        ++device_time_.untimed;
      }
    }
  }
  std::fill(work_.begin(), work_.end(), nullptr);
  stats.exposed_ms = ms_between(backward_done, end);
  stats.comm_ms = buckets_.empty() ? 0 : ms_between(launched_at_.front(), std::max(last_done, backward_done));
  stats.comm_ms = std::max(stats.comm_ms, stats.exposed_ms);
  stats.hidden_fraction = stats.comm_ms > 0 ? 1.0 - stats.exposed_ms / stats.comm_ms : 1.0;
  return stats;
}

DeviceCommTime Reducer::take_device_comm_time() {
  // The communication stream runs the steps in order: the first unfinished one ends the scan.
  while (!untimed_steps_.empty() && untimed_steps_.front().last->is_completed()) {
    const UntimedStep& s = untimed_steps_.front();
    if (const std::optional<double> ms = s.last->device_ms_since_ready_of(*s.first)) {
      device_time_.comm_ms += *ms;
      ++device_time_.steps;
    } else {
      ++device_time_.untimed;  // failed: its error comes from the step's wait
    }
    untimed_steps_.pop_front();
  }
  return std::exchange(device_time_, DeviceCommTime{});
}

void Reducer::replan_from_rank0_order() {
  // Every rank adopts rank 0's order, so all pack the same buckets.
  std::vector<int64_t> order(params_.size(), -1);
  std::vector<char> seen(params_.size(), 0);
  size_t n = 0;
  for (size_t index : ready_order_) {
    order[n++] = static_cast<int64_t>(index);
    seen[index] = 1;
  }
  for (size_t i = params_.size(); i-- > 0;)  // never-ready parameters go last, reverse order
    if (!seen[i]) order[n++] = static_cast<int64_t>(i);
  Tensor t = from_vector<int64_t>(order, {static_cast<int64_t>(order.size())}, params_.front().second.device());
  group_.broadcast(t, 0, /*tag=*/-2)->wait();
  // The host needs the order to re-plan: one read, once per run (in the second synchronised
  // step), not a per-step sync, so run.check_host_syncs lets it through.
  AllowHostSyncGuard once_per_run;
  const std::vector<int64_t> agreed = t.to_vector<int64_t>();
  std::vector<size_t> plan_order(agreed.size());
  for (size_t i = 0; i < agreed.size(); ++i) {
    DP_CHECK(agreed[i] >= 0 && agreed[i] < static_cast<int64_t>(params_.size()),
             "DDP: rank 0 sent an invalid bucket order (does every rank build the same model?)");
    plan_order[i] = static_cast<size_t>(agreed[i]);
  }
  plan(plan_order, /*initial=*/false);
  ++replans_;
}

uint64_t model_structure_hash(const nn::Module& model) {
  Fnv1a h;
  hash_entries(h, model.named_parameters());
  hash_entries(h, model.named_buffers());
  return h.value();
}

void broadcast_model_from_rank0(nn::Module& model, ProcessGroup& group) {
  const std::vector<nn::NamedTensor> params = model.named_parameters(), buffers = model.named_buffers();
  DP_CHECK(!params.empty(), "DDP: the model has no parameters");
  const Device device = params.front().second.device();
  // One all-gather of the structure hash (as int64 bits) tells every rank who differs.
  const uint64_t mine = model_structure_hash(model);
  Tensor local = from_vector<int64_t>({static_cast<int64_t>(mine)}, {1}, device);
  Tensor all = empty({group.size()}, kInt64, device);
  group.all_gather(local, all, /*tag=*/-3)->wait();
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  std::vector<int> differ;
  for (int r = 0; r < group.size(); ++r)
    if (hashes[r] != hashes[0]) differ.push_back(r);
  if (!differ.empty()) {
    std::ostringstream ranks;
    for (size_t i = 0; i < differ.size(); ++i) ranks << (i ? ", " : "") << differ[i];
    throw Error(detail::concat("DDP: rank(s) ", ranks.str(), " built a different model from rank 0 (parameter "
                               "or buffer names, shapes or dtypes differ); every rank must use the same config"));
  }
  NoGradGuard no_grad;
  std::vector<WorkPtr> work;
  for (const auto* list : {&params, &buffers})
    for (const auto& [name, t] : *list) work.push_back(group.broadcast(t, 0, /*tag=*/-4));
  for (WorkPtr& w : work) w->wait();
}

void sync_buffers(nn::Module& model, ProcessGroup& group, BufferSync mode) {
  NoGradGuard no_grad;
  std::vector<WorkPtr> work;
  for (const auto& [name, t] : model.named_buffers()) {
    if (mode == BufferSync::Average && is_floating(t.dtype())) work.push_back(group.all_reduce(t, CollectiveReduce::Average, -5));
    else work.push_back(group.broadcast(t, 0, /*tag=*/-5));
  }
  for (WorkPtr& w : work) w->wait();
}

}  // namespace dp
