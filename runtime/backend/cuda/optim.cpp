// Front-ends of the CUDA optimiser kernels (optim.cu): fused SGD / AdamW / LAMB-direction / LARS
// updates over flat buffers and the multi-tensor squared norms. float32 and float64 only
// (CudaBackend::supports). The scalars are computed here in double exactly as the CPU backend
// computes them (runtime/backend/cpu/optim.cpp) and cast to the element type by the launcher.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_set>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/optim_kernels.h"

namespace dp::cuda {

namespace {

// Every buffer contiguous, with the parameter's numel and dtype (the CPU backend's check_flat).
void check_flat(const char* op, const Tensor& param, std::initializer_list<const Tensor*> others) {
  DP_CHECK(param.is_contiguous(), op, ": the parameter must be contiguous, got ", param.str());
  for (const Tensor* t : others)
    DP_CHECK(t->is_contiguous() && t->numel() == param.numel() && t->dtype() == param.dtype(), op,
             ": every buffer must be contiguous with the parameter's numel and dtype, got ", t->str(), " for ",
             param.str());
}

// A one-element tensor of `dtype` on this device, or undefined (NOTE [ Device-resident optimiser
// step ], backend.h).
void check_control_scalar(const CudaBackend& backend, const char* op, const char* what, const Tensor& t, DType dtype) {
  if (!t.defined()) return;
  backend.check_operand(op, t);
  DP_CHECK(t.numel() == 1 && t.dtype() == dtype && t.is_contiguous(), op, ": control ", what, " must be a one-element ",
           dtype_name(dtype), " tensor, got ", t.str());
}

DeviceControl device_control(const CudaBackend& backend, const char* op, const StepControl& c) {
  check_control_scalar(backend, op, "found_inf", c.found_inf, kFloat32);
  check_control_scalar(backend, op, "lr", c.lr, kFloat64);
  check_control_scalar(backend, op, "step_count", c.step_count, kInt64);
  DeviceControl d;
  d.found_inf = c.found_inf.defined() ? c.found_inf.data<float>() : nullptr;
  d.lr = c.lr.defined() ? c.lr.data<double>() : nullptr;
  d.lr_scale = c.lr_scale;
  d.step_count = c.step_count.defined() ? c.step_count.data<int64_t>() : nullptr;
  return d;
}

// The CPU backend's AdamConstants, in double (cast to the element type by the launcher).
AdamScalars adam_scalars(const AdamParams& p) {
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  AdamScalars s;
  s.beta1 = p.beta1;
  s.one_minus_beta1 = 1.0 - p.beta1;
  s.beta2 = p.beta2;
  s.one_minus_beta2 = 1.0 - p.beta2;
  s.eps = p.eps;
  s.inv_divisor = 1.0 / p.grad_divisor;
  s.divisor = p.grad_divisor;
  s.divide = p.grad_divisor != 1.0;
  s.step_size = p.lr / bc1;
  s.bc1 = bc1;
  s.bc2 = bc2;
  s.bc2_sqrt = std::sqrt(bc2);
  s.weight_decay = p.weight_decay;
  // p·(1 − lr·λ) as p − (lr·λ)·p, as the CPU backend (rounding 1 − lr·λ would bias every step).
  s.lr_wd = p.lr * p.weight_decay;
  s.lr = p.lr;
  s.step = p.step;
  return s;
}

// The device pointer of trust_ratios[index] (float64 on this device), checked.
const double* device_trust_of(const CudaBackend& backend, const char* op, const Tensor& trust_ratios, int64_t index) {
  backend.check_operand(op, trust_ratios);
  DP_CHECK(trust_ratios.dtype() == kFloat64 && trust_ratios.is_contiguous() && index >= 0 &&
               index < trust_ratios.numel(),
           op, ": trust_ratios must be contiguous float64 holding index ", index, ", got ", trust_ratios.str());
  return trust_ratios.data<double>() + index;
}

// Two items may share a multi-tensor launch when everything but their per-tensor values (step
// count, device trust ratio) is equal: then one op built from either updates both as their own
// single launches would.
bool same_control(const DeviceControl& a, const DeviceControl& b) {
  return a.found_inf == b.found_inf && a.lr == b.lr && a.lr_scale == b.lr_scale;
}
bool same_launch(const SgdScalars& a, const SgdScalars& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.dampening == b.dampening && a.weight_decay == b.weight_decay &&
         a.nesterov == b.nesterov && a.first_step == b.first_step && same_control(a.control, b.control);
}
bool same_launch(const AdamScalars& a, const AdamScalars& b) {
  return a.beta1 == b.beta1 && a.one_minus_beta1 == b.one_minus_beta1 && a.beta2 == b.beta2 &&
         a.one_minus_beta2 == b.one_minus_beta2 && a.eps == b.eps && a.inv_divisor == b.inv_divisor &&
         a.divisor == b.divisor && a.divide == b.divide && a.step_size == b.step_size && a.bc1 == b.bc1 &&
         a.bc2 == b.bc2 && a.bc2_sqrt == b.bc2_sqrt && a.weight_decay == b.weight_decay && a.lr_wd == b.lr_wd &&
         a.lr == b.lr && a.step == b.step && a.grad_norm == b.grad_norm && a.max_grad_norm == b.max_grad_norm &&
         same_control(a.control, b.control);
}
bool same_launch(const LambUpdateScalars& a, const LambUpdateScalars& b) {
  return a.lr == b.lr && a.trust == b.trust && same_control(a.control, b.control);
}
bool same_launch(DType a, DType b) { return a == b; }
bool same_launch(const LarsScalars& a, const LarsScalars& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.weight_decay == b.weight_decay && a.trust == b.trust &&
         a.lr_outside_momentum == b.lr_outside_momentum && same_control(a.control, b.control);
}

// One nonempty tensor's part of a multi-tensor launch, checked and converted.
template <typename Scalars>
struct Prepared {
  Scalars s;
  MultiTensor tensor;
  DType dtype;
  const Tensor* param;  // the caller's, for a launch error
};

// "<first parameter> and <n> more tensors", for a launch error (built only on failure).
std::string describe_run(const Tensor& first, size_t count) {
  return count == 1 ? first.str() : first.str() + " and " + std::to_string(count - 1) + " more tensors";
}

// Calls launch(tensors, scalars, dtype, first parameter) once per run of consecutive items that
// may share a launch (same_launch, one dtype, all or none with a device step count, no buffer
// named twice). A tensor listed twice (e.g. a tied weight's gradient in a caller's list for
// clip_grad_norm_on_device_) starts a new run: in one launch its two updates would race, where
// the contract, and the CPU, apply them one after the other.
template <typename Scalars, typename Launch>
void launch_in_runs(const std::vector<Prepared<Scalars>>& items, Launch&& launch) {
  std::vector<MultiTensor> run;
  std::unordered_set<const void*> in_run;
  const auto shares_a_buffer = [&](const MultiTensor& t) {
    for (const void* buffer : t.buffers)
      if (buffer != nullptr && in_run.count(buffer) != 0) return true;
    return false;
  };
  const auto add = [&](const MultiTensor& t) {
    run.push_back(t);
    for (const void* buffer : t.buffers)
      if (buffer != nullptr) in_run.insert(buffer);
  };
  for (size_t a = 0; a < items.size();) {
    const Prepared<Scalars>& first = items[a];
    run.clear();
    in_run.clear();
    add(first.tensor);
    size_t b = a + 1;
    for (; b < items.size(); ++b) {
      const Prepared<Scalars>& next = items[b];
      if (next.dtype != first.dtype || !same_launch(next.s, first.s) ||
          (next.tensor.step_count == nullptr) != (first.tensor.step_count == nullptr) || shares_a_buffer(next.tensor))
        break;
      add(next.tensor);
    }
    launch(run, first.s, first.dtype, *first.param);
    a = b;
  }
}

// Launches the prepared items, run by run (launch_in_runs), through a family's multi-tensor
// launcher (optim_kernels.h); a launch error names the op and the run's first parameter.
template <typename Scalars, typename Launcher>
void launch_prepared(const char* op, int device, cudaStream_t stream, const std::vector<Prepared<Scalars>>& prepared,
                     Launcher&& launcher) {
  launch_in_runs(prepared, [&](const std::vector<MultiTensor>& ts, const Scalars& s, DType dtype, const Tensor& first) {
    DP_CUDA_CHECK(device, launcher(ts.data(), static_cast<int64_t>(ts.size()), dtype, s, stream), op, " ",
                  describe_run(first, ts.size()));
  });
}

// The MultiTensor of buffers (undefined ones: null), numel elements each.
MultiTensor multi_tensor(int64_t numel, std::initializer_list<const Tensor*> buffers, const int64_t* step_count,
                         const double* device_trust) {
  MultiTensor t;
  int b = 0;
  for (const Tensor* x : buffers) t.buffers[b++] = x->defined() ? x->raw_data() : nullptr;
  t.numel = numel;
  t.step_count = step_count;
  t.device_trust = device_trust;
  return t;
}

}  // namespace

void CudaBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdParams& p) {
  sgd_update_multi({SgdUpdateItem{param, grad, momentum_buf, p}});
}

void CudaBackend::sgd_update_multi(const std::vector<SgdUpdateItem>& items) {
  std::vector<Prepared<SgdScalars>> prepared;
  for (const SgdUpdateItem& it : items) {
    const Tensor &param = it.param, &grad = it.grad, &momentum_buf = it.momentum_buf;
    const SgdParams& p = it.p;
    check_operand("sgd_update", param);
    check_operand("sgd_update", grad);
    const bool use_momentum = p.momentum != 0.0;
    if (use_momentum) {
      DP_CHECK(momentum_buf.defined(), "sgd_update: momentum ", p.momentum, " needs a momentum buffer");
      check_operand("sgd_update", momentum_buf);
    }
    check_supported(Kernel::SgdUpdate, param.dtype());
    if (use_momentum) check_flat("sgd_update", param, {&grad, &momentum_buf});
    else check_flat("sgd_update", param, {&grad});
    SgdScalars s;
    s.lr = p.lr;
    s.momentum = p.momentum;
    s.dampening = p.dampening;
    s.weight_decay = p.weight_decay;
    s.nesterov = p.nesterov;
    s.first_step = p.first_step;
    s.control = device_control(*this, "sgd_update", p.control);
    if (param.numel() == 0) continue;
    const Tensor none;
    prepared.push_back({s, multi_tensor(param.numel(), {&param, &grad, use_momentum ? &momentum_buf : &none}, s.control.step_count, nullptr),
                        param.dtype(), &param});
  }
  if (prepared.empty()) return;
  activate();
  launch_prepared("sgd_update", device_, stream_, prepared, launch_sgd_update_multi);
}

void CudaBackend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                               const Tensor& exp_avg_sq, const AdamParams& p) {
  adamw_update_multi({AdamwUpdateItem{param, grad, exp_avg, exp_avg_sq, p}});
}

void CudaBackend::adamw_update_multi(const std::vector<AdamwUpdateItem>& items) {
  std::vector<Prepared<AdamScalars>> prepared;
  for (const AdamwUpdateItem& it : items) {
    const Tensor &param = it.param, &grad = it.grad, &exp_avg = it.exp_avg, &exp_avg_sq = it.exp_avg_sq;
    const AdamParams& p = it.p;
    for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq}) check_operand("adamw_update", *t);
    check_supported(Kernel::AdamwUpdate, param.dtype());
    check_flat("adamw_update", param, {&grad, &exp_avg, &exp_avg_sq});
    DP_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got ", p.step);
    AdamScalars s = adam_scalars(p);
    s.control = device_control(*this, "adamw_update", p.control);
    if (param.numel() == 0) continue;
    prepared.push_back({s, multi_tensor(param.numel(), {&param, &grad, &exp_avg, &exp_avg_sq}, s.control.step_count, nullptr),
                        param.dtype(), &param});
  }
  if (prepared.empty()) return;
  activate();
  launch_prepared("adamw_update", device_, stream_, prepared, launch_adamw_update_multi);
}

void CudaBackend::lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                 const Tensor& exp_avg_sq, const Tensor& update, const AdamParams& p) {
  lamb_direction_multi({LambDirectionItem{param, grad, exp_avg, exp_avg_sq, update, p}});
}

void CudaBackend::lamb_direction_multi(const std::vector<LambDirectionItem>& items) {
  std::vector<Prepared<AdamScalars>> prepared;
  for (const LambDirectionItem& it : items) {
    const Tensor &param = it.param, &grad = it.grad, &exp_avg = it.exp_avg, &exp_avg_sq = it.exp_avg_sq,
                 &update = it.update;
    const AdamParams& p = it.p;
    for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq, &update}) check_operand("lamb_direction", *t);
    check_supported(Kernel::LambDirection, param.dtype());
    check_flat("lamb_direction", param, {&grad, &exp_avg, &exp_avg_sq, &update});
    DP_CHECK(p.step >= 1, "lamb_direction: step must be >= 1, got ", p.step);
    AdamScalars s = adam_scalars(p);
    s.control = device_control(*this, "lamb_direction", p.control);
    if (p.grad_norm.defined()) {  // apex's divisor from the norm on the device
      check_operand("lamb_direction", p.grad_norm);
      DP_CHECK(p.grad_norm.dtype() == kFloat64 && p.grad_norm.numel() == 1 && p.max_grad_norm > 0,
               "lamb_direction: grad_norm must be one float64 with max_grad_norm > 0, got ", p.grad_norm.str(),
               " and ", p.max_grad_norm);
      s.grad_norm = p.grad_norm.data<double>();
      s.max_grad_norm = p.max_grad_norm;
    }
    if (param.numel() == 0) continue;
    prepared.push_back(
        {s, multi_tensor(param.numel(), {&param, &grad, &exp_avg, &exp_avg_sq, &update}, s.control.step_count, nullptr),
         param.dtype(), &param});
  }
  if (prepared.empty()) return;
  activate();
  launch_prepared("lamb_direction", device_, stream_, prepared, launch_lamb_direction_multi);
}

void CudaBackend::lamb_update(const Tensor& param, const Tensor& update, const LambUpdateParams& p) {
  lamb_update_multi({LambUpdateItem{param, update, p}});
}

void CudaBackend::lamb_update_multi(const std::vector<LambUpdateItem>& items) {
  std::vector<Prepared<LambUpdateScalars>> prepared;
  for (const LambUpdateItem& it : items) {
    const Tensor &param = it.param, &update = it.update;
    const LambUpdateParams& p = it.p;
    for (const Tensor* t : {&param, &update}) check_operand("lamb_update", *t);
    check_supported(Kernel::LambUpdate, param.dtype());
    check_flat("lamb_update", param, {&update});
    LambUpdateScalars s;
    s.lr = p.lr;
    s.trust = p.trust;
    if (p.trust_ratios.defined()) s.device_trust = device_trust_of(*this, "lamb_update", p.trust_ratios, p.trust_index);
    s.control = device_control(*this, "lamb_update", p.control);
    if (param.numel() == 0) continue;
    // The step count is not read (LAMB's second stage has no bias correction).
    prepared.push_back({s, multi_tensor(param.numel(), {&param, &update}, nullptr, s.device_trust), param.dtype(), &param});
  }
  if (prepared.empty()) return;
  activate();
  launch_prepared("lamb_update", device_, stream_, prepared, launch_lamb_update_multi);
}

void CudaBackend::lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                              const LarsParams& p) {
  lars_update_multi({LarsUpdateItem{param, grad, momentum_buf, p}});
}

void CudaBackend::lars_update_multi(const std::vector<LarsUpdateItem>& items) {
  std::vector<Prepared<LarsScalars>> prepared;
  for (const LarsUpdateItem& it : items) {
    const Tensor &param = it.param, &grad = it.grad, &momentum_buf = it.momentum_buf;
    const LarsParams& p = it.p;
    for (const Tensor* t : {&param, &grad, &momentum_buf}) check_operand("lars_update", *t);
    check_supported(Kernel::LarsUpdate, param.dtype());
    check_flat("lars_update", param, {&grad, &momentum_buf});
    LarsScalars s;
    s.lr = p.lr;
    s.momentum = p.momentum;
    s.weight_decay = p.weight_decay;
    s.trust = p.trust;
    if (p.trust_ratios.defined())  // the ratio lars_trust_ratios left on the device
      s.device_trust = device_trust_of(*this, "lars_update", p.trust_ratios, p.trust_index);
    s.lr_outside_momentum = p.lr_outside_momentum;
    s.control = device_control(*this, "lars_update", p.control);
    if (param.numel() == 0) continue;
    prepared.push_back(
        {s, multi_tensor(param.numel(), {&param, &grad, &momentum_buf}, nullptr, s.device_trust), param.dtype(), &param});
  }
  if (prepared.empty()) return;
  activate();
  launch_prepared("lars_update", device_, stream_, prepared, launch_lars_update_multi);
}

void CudaBackend::squared_norms(const std::vector<Tensor>& xs, const Tensor& out) {
  check_operand("squared_norms", out);
  DP_CHECK(out.is_contiguous() && out.dtype() == kFloat64 && out.numel() == static_cast<int64_t>(xs.size()),
           "squared_norms: out must be a contiguous float64 tensor of ", xs.size(), " elements, got ", out.str());
  std::vector<NormInput> inputs(xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    check_operand("squared_norms", x);
    check_supported(Kernel::SquaredNorms, x.dtype());
    DP_CHECK(x.is_contiguous(), "squared_norms: tensor ", k, " must be contiguous, got ", x.str());
    inputs[k] = NormInput{x.raw_data(), x.numel(), x.dtype()};
  }
  if (xs.empty()) return;
  activate();
  const int64_t count = static_cast<int64_t>(inputs.size());
  const size_t scratch_bytes = squared_norms_scratch_bytes(inputs.data(), count);
  // Stream-ordered: freeing right after the launches queue is safe (NOTE [ CUDA memory pool ]).
  struct Scratch {
    CudaBackend* backend;
    void* ptr;
    size_t nbytes;
    ~Scratch() { backend->deallocate(ptr, nbytes); }
  } scratch{this, allocate(scratch_bytes), scratch_bytes};
  DP_CUDA_CHECK(device_,
                launch_squared_norms(inputs.data(), count, out.data<double>(), scratch.ptr, scratch.nbytes, stream_),
                "squared_norms over ", xs.size(), " tensors");
}

void CudaBackend::lars_trust_ratios(const Tensor& squared_norms, double weight_decay, double eta, double eps,
                                    const Tensor& out) {
  check_operand("lars_trust_ratios", squared_norms);
  check_operand("lars_trust_ratios", out);
  check_supported(Kernel::LarsTrustRatios, squared_norms.dtype());
  DP_CHECK(squared_norms.dtype() == kFloat64 && out.dtype() == kFloat64 && squared_norms.is_contiguous() &&
               out.is_contiguous() && squared_norms.numel() == 2 * out.numel(),
           "lars_trust_ratios: expected contiguous float64 norms [2n] and ratios [n], got ", squared_norms.str(),
           " and ", out.str());
  if (out.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_trust_ratios(squared_norms.data<double>(), nullptr, weight_decay, out.numel(), eta, eps,
                                    out.data<double>(), stream_),
                "lars_trust_ratios over ", out.numel(), " parameters");
}

// ---- Device-resident step bookkeeping ---------------------------------------------------------

void CudaBackend::count_steps(const std::vector<Tensor>& counters, const Tensor& found_inf, StepCounting how) {
  check_control_scalar(*this, "count_steps", "found_inf", found_inf, kFloat32);
  std::vector<int64_t*> pointers(counters.size());
  for (size_t k = 0; k < counters.size(); ++k) {
    const Tensor& c = counters[k];
    DP_CHECK(c.defined(), "count_steps: counter ", k, " is undefined");
    check_control_scalar(*this, "count_steps", "counter", c, kInt64);
    pointers[k] = c.data<int64_t>();
  }
  if (pointers.empty()) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_count_steps(pointers.data(), static_cast<int64_t>(pointers.size()),
                                   found_inf.defined() ? found_inf.data<float>() : nullptr, static_cast<int>(how),
                                   stream_),
                "count_steps over ", pointers.size(), " counters");
}

void CudaBackend::lr_lookup(const Tensor& table, const Tensor& clock, const Tensor& out) {
  check_operand("lr_lookup", table);
  DP_CHECK(table.dtype() == kFloat64 && table.dim() == 1 && table.numel() >= 1 && table.is_contiguous(),
           "lr_lookup: the table must be a non-empty contiguous float64 vector, got ", table.str());
  DP_CHECK(clock.defined() && out.defined(), "lr_lookup: clock and out are required");
  check_control_scalar(*this, "lr_lookup", "clock", clock, kInt64);
  check_control_scalar(*this, "lr_lookup", "out", out, kFloat64);
  activate();
  DP_CUDA_CHECK(device_,
                launch_lr_lookup(table.data<double>(), table.numel(), clock.data<int64_t>(), out.data<double>(), stream_),
                "lr_lookup");
}

void CudaBackend::clip_coefficient(const Tensor& squared_norms, double max_norm, const Tensor& found_inf,
                                   const Tensor& out) {
  DP_CHECK(max_norm > 0, "clip_coefficient: max_norm must be > 0, got ", max_norm);
  check_operand("clip_coefficient", squared_norms);
  check_operand("clip_coefficient", out);
  DP_CHECK(squared_norms.dtype() == kFloat64 && squared_norms.dim() == 1 && squared_norms.is_contiguous(),
           "clip_coefficient: squared_norms must be a contiguous float64 vector, got ", squared_norms.str());
  DP_CHECK(out.dtype() == kFloat64 && out.numel() == 2 && out.is_contiguous(),
           "clip_coefficient: out must be a contiguous float64 [2], got ", out.str());
  DP_CHECK(found_inf.defined(), "clip_coefficient: found_inf is required");
  check_control_scalar(*this, "clip_coefficient", "found_inf", found_inf, kFloat32);
  activate();
  DP_CUDA_CHECK(device_,
                launch_clip_coefficient(squared_norms.numel() > 0 ? squared_norms.data<double>() : nullptr,
                                        squared_norms.numel(), max_norm, out.data<double>(), found_inf.data<float>(),
                                        stream_),
                "clip_coefficient over ", squared_norms.numel(), " norms");
}

void CudaBackend::scale_by(const std::vector<Tensor>& xs, const Tensor& factor) {
  DP_CHECK(factor.defined(), "scale_by: factor is required");
  check_control_scalar(*this, "scale_by", "factor", factor, kFloat64);
  std::vector<Prepared<DType>> prepared;  // the dtype is the whole of a run's "scalars"
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    check_operand("scale_by", x);
    check_supported(Kernel::ScaleBy, x.dtype());
    DP_CHECK(x.is_contiguous(), "scale_by: tensor ", k, " must be contiguous, got ", x.str());
    if (x.numel() == 0) continue;
    prepared.push_back({x.dtype(), multi_tensor(x.numel(), {&x}, nullptr, nullptr), x.dtype(), &x});
  }
  if (prepared.empty()) return;
  activate();
  launch_in_runs(prepared, [&](const std::vector<MultiTensor>& ts, DType, DType dtype, const Tensor& first) {
    DP_CUDA_CHECK(device_,
                  launch_scale_by(ts.data(), static_cast<int64_t>(ts.size()), dtype, factor.data<double>(), stream_),
                  "scale_by ", describe_run(first, ts.size()));
  });
}

}  // namespace dp::cuda
