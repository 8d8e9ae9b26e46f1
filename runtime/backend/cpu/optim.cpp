// Fused optimiser updates: one pass over flat buffers.
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>

namespace dp {

using namespace cpu;

namespace {

// NOTE [ Device-resident optimiser step ] (backend.h): the CPU reads the control's values where
// they are, at the start of the update.
void check_control_scalar(const char* op, const char* what, const Tensor& t, DType dtype) {
  if (!t.defined()) return;
  DP_CHECK(t.numel() == 1 && t.dtype() == dtype && t.device().is_cpu() && t.is_contiguous(), op, ": control ", what,
           " must be a one-element ", dtype_name(dtype), " tensor on the CPU, got ", t.str());
}

struct ControlValues {
  bool skip = false;
  double lr = 0;
  int64_t step_count = -1;  // -1: not given
};

ControlValues read_control(const char* op, const StepControl& c, double host_lr) {
  check_control_scalar(op, "found_inf", c.found_inf, kFloat32);
  check_control_scalar(op, "lr", c.lr, kFloat64);
  check_control_scalar(op, "step_count", c.step_count, kInt64);
  ControlValues v;
  v.skip = c.found_inf.defined() && *c.found_inf.data<float>() != 0.0f;
  v.lr = c.lr.defined() ? *c.lr.data<double>() * c.lr_scale : host_lr;
  if (c.step_count.defined()) {
    v.step_count = *c.step_count.data<int64_t>();
    DP_CHECK(v.step_count >= 0, op, ": control step_count must be >= 0, got ", v.step_count);
  }
  return v;
}

// AdamParams with the control's lr and step, and LAMB's device-decided divisor, in place of the
// host ones; nullopt-like skip flag.
AdamParams resolve_adam(const char* op, const AdamParams& p, bool& skip) {
  const ControlValues v = read_control(op, p.control, p.lr);
  skip = v.skip;
  AdamParams q = p;
  q.lr = v.lr;
  if (v.step_count >= 0) q.step = v.step_count + 1;
  if (p.grad_norm.defined()) {
    check_control_scalar(op, "grad_norm", p.grad_norm, kFloat64);
    DP_CHECK(p.max_grad_norm > 0, op, ": grad_norm needs max_grad_norm > 0, got ", p.max_grad_norm);
    const double norm = *p.grad_norm.data<double>();
    q.grad_divisor = norm > p.max_grad_norm ? norm / p.max_grad_norm : 1.0;  // apex's global clipping
  }
  return q;
}

// The trust ratio an update uses: the host's, or the one a kernel left in trust_ratios.
double trust_of(const char* op, double trust, const Tensor& trust_ratios, int64_t index) {
  if (!trust_ratios.defined()) return trust;
  DP_CHECK(trust_ratios.dtype() == kFloat64 && trust_ratios.is_contiguous() && trust_ratios.device().is_cpu() &&
               index >= 0 && index < trust_ratios.numel(),
           op, ": trust_ratios must be contiguous float64 on the CPU holding index ", index, ", got ",
           trust_ratios.str());
  return trust_ratios.data<double>()[index];
}

}  // namespace

void CpuBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                            const SgdParams& params) {
  DP_ASSERT(param.is_contiguous() && grad.is_contiguous() && param.numel() == grad.numel());
  const bool use_momentum = params.momentum != 0.0;
  if (use_momentum) DP_ASSERT(momentum_buf.is_contiguous() && momentum_buf.numel() == param.numel());
  const ControlValues control = read_control("sgd_update", params.control, params.lr);
  if (control.skip) return;
  SgdParams p = params;
  p.lr = control.lr;
  if (control.step_count >= 0) p.first_step = use_momentum && control.step_count == 0;
  dispatch_floating(param.dtype(), "sgd_update", [&](auto tag) {
    using T = decltype(tag);
    T* const w = param.data<T>();
    const T* const g = grad.data<T>();
    T* const buf = use_momentum ? momentum_buf.data<T>() : nullptr;
    const T lr = T(p.lr), wd = T(p.weight_decay), mom = T(p.momentum), damp = T(1.0 - p.dampening);
    // The options are loop-invariant: pick the loop once so each variant vectorises cleanly.
    auto run = [&](auto with_momentum, auto first, auto nesterov) {
      parallel_range(param.numel(), num_threads_, [&](int64_t begin, int64_t end) {
        T* __restrict wp = w;  // locals (see parallel_range): the loop vectorises
        const T* __restrict gp = g;
        T* __restrict bp = buf;
        const T lr_ = lr, wd_ = wd, mom_ = mom, damp_ = damp;
        for (int64_t i = begin; i < end; ++i) {
          T d = gp[i] + wd_ * wp[i];
          if constexpr (decltype(with_momentum)::value) {
            const T b = decltype(first)::value ? d : mom_ * bp[i] + damp_ * d;
            bp[i] = b;
            d = decltype(nesterov)::value ? d + mom_ * b : b;
          }
          wp[i] -= lr_ * d;
        }
      });
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (!use_momentum) run(No{}, No{}, No{});
    else if (p.first_step) p.nesterov ? run(Yes{}, Yes{}, Yes{}) : run(Yes{}, Yes{}, No{});
    else p.nesterov ? run(Yes{}, No{}, Yes{}) : run(Yes{}, No{}, No{});
  });
}

}  // namespace dp

namespace dp {

namespace {

void check_flat(const char* op, const Tensor& param, std::initializer_list<const Tensor*> others) {
  DP_ASSERT(param.is_contiguous());
  for (const Tensor* t : others)
    DP_CHECK(t->is_contiguous() && t->numel() == param.numel() && t->dtype() == param.dtype(), op,
             ": every buffer must be contiguous with the parameter's numel and dtype, got ", t->str(), " for ",
             param.str());
}

// The scalars of an Adam-family update, computed in double and cast once (as torch does with its
// Python floats); shared by AdamW and LAMB.
template <typename T>
struct AdamConstants {
  T b1, one_minus_b1, b2, one_minus_b2, eps, inv_divisor, step_size, bc1, bc2_sqrt, wd, lr;
  explicit AdamConstants(const AdamParams& p) {
    const double bc1d = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
    const double bc2d = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
    b1 = T(p.beta1), one_minus_b1 = T(1.0 - p.beta1), b2 = T(p.beta2), one_minus_b2 = T(1.0 - p.beta2);
    eps = T(p.eps), inv_divisor = T(1.0 / p.grad_divisor), step_size = T(p.lr / bc1d), bc1 = T(bc1d);
    bc2_sqrt = T(std::sqrt(bc2d)), wd = T(p.weight_decay), lr = T(p.lr);
  }
};

}  // namespace

void CpuBackend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const AdamParams& params) {
  check_flat("adamw_update", param, {&grad, &exp_avg, &exp_avg_sq});
  bool skip = false;
  const AdamParams p = resolve_adam("adamw_update", params, skip);
  if (skip) return;
  DP_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got ", p.step);
  dispatch_floating(param.dtype(), "adamw_update", [&](auto tag) {
    using T = decltype(tag);
    T* const w = param.data<T>();
    const T* const g = grad.data<T>();
    T* const m = exp_avg.data<T>();
    T* const v = exp_avg_sq.data<T>();
    const AdamConstants<T> constants(p);
    // p·(1 − lr·λ) as p − (lr·λ)·p: rounding the small lr·λ to float32 is harmless, rounding
    // 1 − lr·λ would bias every step by up to 3e-8 relative.
    const T lr_wd = T(p.lr * p.weight_decay);
    const bool divide = p.grad_divisor != 1.0;
    parallel_range(param.numel(), num_threads_, [&](int64_t begin, int64_t end) {
      T* __restrict wp = w;  // locals (see parallel_range): the loop vectorises
      const T* __restrict gp = g;
      T* __restrict mp = m;
      T* __restrict vp = v;
      const AdamConstants<T> c = constants;
      const T lr_wd_ = lr_wd;
      const T scale = divide ? c.inv_divisor : T(1);  // g·1 is g, exactly
      for (int64_t i = begin; i < end; ++i) {
        const T gi = gp[i] * scale;
        const T mi = c.b1 * mp[i] + c.one_minus_b1 * gi;
        const T vi = c.b2 * vp[i] + c.one_minus_b2 * gi * gi;
        mp[i] = mi;
        vp[i] = vi;
        wp[i] = wp[i] - lr_wd_ * wp[i] - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
      }
    });
  });
}

void CpuBackend::lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                const Tensor& exp_avg_sq, const Tensor& update, const AdamParams& params) {
  check_flat("lamb_direction", param, {&grad, &exp_avg, &exp_avg_sq, &update});
  bool skip = false;
  const AdamParams p = resolve_adam("lamb_direction", params, skip);
  if (skip) return;
  DP_CHECK(p.step >= 1, "lamb_direction: step must be >= 1, got ", p.step);
  dispatch_floating(param.dtype(), "lamb_direction", [&](auto tag) {
    using T = decltype(tag);
    const T* const w = param.data<T>();
    const T* const g = grad.data<T>();
    T* const m = exp_avg.data<T>();
    T* const v = exp_avg_sq.data<T>();
    T* const u = update.data<T>();
    const AdamConstants<T> constants(p);
    const T bc2 = T(1.0 - std::pow(p.beta2, static_cast<double>(p.step)));
    const T divisor = T(p.grad_divisor);
    parallel_range(param.numel(), num_threads_, [&](int64_t begin, int64_t end) {
      const T* __restrict wp = w;  // locals (see parallel_range): the loop vectorises
      const T* __restrict gp = g;
      T* __restrict mp = m;
      T* __restrict vp = v;
      T* __restrict up = u;
      const AdamConstants<T> c = constants;
      const T bc2_ = bc2, divisor_ = divisor;
      for (int64_t i = begin; i < end; ++i) {
        const T gi = gp[i] / divisor_;  // apex divides by the clipping factor
        const T mi = c.b1 * mp[i] + c.one_minus_b1 * gi;
        const T vi = c.b2 * vp[i] + c.one_minus_b2 * gi * gi;
        mp[i] = mi;
        vp[i] = vi;
        up[i] = (mi / c.bc1) / (std::sqrt(vi / bc2_) + c.eps) + c.wd * wp[i];
      }
    });
  });
}

void CpuBackend::lamb_update(const Tensor& param, const Tensor& update, const LambUpdateParams& params) {
  check_flat("lamb_update", param, {&update});
  const ControlValues control = read_control("lamb_update", params.control, params.lr);
  if (control.skip) return;
  const double trust = trust_of("lamb_update", params.trust, params.trust_ratios, params.trust_index);
  dispatch_floating(param.dtype(), "lamb_update", [&](auto tag) {
    using T = decltype(tag);
    T* const w = param.data<T>();
    const T* const u = update.data<T>();
    const T scaled_lr = T(control.lr * trust);
    parallel_range(param.numel(), num_threads_, [&](int64_t begin, int64_t end) {
      T* __restrict wp = w;  // locals (see parallel_range): the loop vectorises
      const T* __restrict up = u;
      const T s = scaled_lr;
      for (int64_t i = begin; i < end; ++i) wp[i] = wp[i] - s * up[i];  // fma(−s, u, w): axpby's rounding
    });
  });
}

void CpuBackend::lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                             const LarsParams& params) {
  check_flat("lars_update", param, {&grad, &momentum_buf});
  const ControlValues control = read_control("lars_update", params.control, params.lr);
  if (control.skip) return;
  LarsParams p = params;
  p.lr = control.lr;
  dispatch_floating(param.dtype(), "lars_update", [&](auto tag) {
    using T = decltype(tag);
    T* const w = param.data<T>();
    const T* const g = grad.data<T>();
    T* const buf = momentum_buf.data<T>();
    const double trust_ratio = trust_of("lars_update", p.trust, p.trust_ratios, p.trust_index);
    const T wd = T(p.weight_decay), mom = T(p.momentum), lr = T(p.lr), trust = T(trust_ratio);
    const T scaled_lr = T(p.lr * trust_ratio);
    const bool lr_outside_momentum = p.lr_outside_momentum;
    parallel_range(param.numel(), num_threads_, [&](int64_t begin, int64_t end) {
      T* __restrict wp = w;  // locals (see parallel_range): the loops vectorise
      const T* __restrict gp = g;
      T* __restrict bp = buf;
      const T wd_ = wd, mom_ = mom, lr_ = lr, trust_ = trust, scaled_lr_ = scaled_lr;
      if (lr_outside_momentum) {
        for (int64_t i = begin; i < end; ++i) {
          const T b = mom_ * bp[i] + trust_ * (gp[i] + wd_ * wp[i]);
          bp[i] = b;
          wp[i] -= lr_ * b;
        }
      } else {
        for (int64_t i = begin; i < end; ++i) {
          const T b = mom_ * bp[i] - scaled_lr_ * (gp[i] + wd_ * wp[i]);
          bp[i] = b;
          wp[i] += b;
        }
      }
    });
  });
}

void CpuBackend::lars_trust_ratios(const Tensor& squared_norms, double weight_decay, double eta, double eps,
                                   const Tensor& out) {
  DP_CHECK(squared_norms.dtype() == kFloat64 && out.dtype() == kFloat64 && squared_norms.is_contiguous() &&
               out.is_contiguous() && squared_norms.numel() == 2 * out.numel(),
           "lars_trust_ratios: expected contiguous float64 norms [2n] and ratios [n], got ", squared_norms.str(),
           " and ", out.str());
  const double* sq = squared_norms.data<double>();
  double* ratio = out.data<double>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double w_norm = std::sqrt(sq[2 * i]), g_norm = std::sqrt(sq[2 * i + 1]);
    ratio[i] = w_norm == 0 || g_norm == 0 ? 1.0 : eta * w_norm / (g_norm + weight_decay * w_norm + eps);
  }
}

void CpuBackend::squared_norms(const std::vector<Tensor>& xs, const Tensor& out) {
  DP_ASSERT(out.is_contiguous() && out.dtype() == kFloat64 && out.numel() == static_cast<int64_t>(xs.size()));
  double* result = out.data<double>();
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    DP_CHECK(x.is_contiguous(), "squared_norms: tensor ", k, " must be contiguous, got ", x.str());
    result[k] = dispatch_floating(x.dtype(), "squared_norms", [&](auto tag) {
      using T = decltype(tag);
      const T* d = x.data<T>();
      const int64_t n = x.numel();
      double sum = 0;
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) reduction(+ : sum) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(d[i]) * static_cast<double>(d[i]);
      return sum;
    });
  }
}

// ---- Device-resident step bookkeeping ---------------------------------------------------------

void CpuBackend::count_steps(const std::vector<Tensor>& counters, const Tensor& found_inf, StepCounting how) {
  check_control_scalar("count_steps", "found_inf", found_inf, kFloat32);
  const bool found = found_inf.defined() && *found_inf.data<float>() != 0.0f;
  for (size_t k = 0; k < counters.size(); ++k) {
    const Tensor& c = counters[k];
    DP_CHECK(c.defined() && c.numel() == 1 && c.dtype() == kInt64 && c.device().is_cpu(), "count_steps: counter ", k,
             " must be a one-element int64 tensor on the CPU, got ", c.defined() ? c.str() : std::string("undefined"));
    int64_t& v = *c.data<int64_t>();
    switch (how) {
      case StepCounting::IfApplied: v += found ? 0 : 1; break;
      case StepCounting::IfSkipped: v += found ? 1 : 0; break;
      case StepCounting::SkipRun: v = found ? v + 1 : 0; break;
      case StepCounting::Always: v += 1; break;
    }
  }
}

void CpuBackend::lr_lookup(const Tensor& table, const Tensor& clock, const Tensor& out) {
  DP_CHECK(table.dtype() == kFloat64 && table.dim() == 1 && table.numel() >= 1 && table.is_contiguous(),
           "lr_lookup: the table must be a non-empty contiguous float64 vector, got ", table.str());
  check_control_scalar("lr_lookup", "clock", clock, kInt64);
  check_control_scalar("lr_lookup", "out", out, kFloat64);
  DP_CHECK(clock.defined() && out.defined(), "lr_lookup: clock and out are required");
  const int64_t step = *clock.data<int64_t>();
  DP_CHECK(step >= 0, "lr_lookup: the clock must be >= 0, got ", step);
  *out.data<double>() = table.data<double>()[std::min(step, table.numel() - 1)];
}

void CpuBackend::clip_coefficient(const Tensor& squared_norms, double max_norm, const Tensor& found_inf,
                                  const Tensor& out) {
  DP_CHECK(max_norm > 0, "clip_coefficient: max_norm must be > 0, got ", max_norm);
  DP_CHECK(squared_norms.dtype() == kFloat64 && squared_norms.dim() == 1 && squared_norms.is_contiguous(),
           "clip_coefficient: squared_norms must be a contiguous float64 vector, got ", squared_norms.str());
  DP_CHECK(out.dtype() == kFloat64 && out.numel() == 2 && out.is_contiguous(),
           "clip_coefficient: out must be a contiguous float64 [2], got ", out.str());
  check_control_scalar("clip_coefficient", "found_inf", found_inf, kFloat32);
  DP_CHECK(found_inf.defined(), "clip_coefficient: found_inf is required");
  const double* sq = squared_norms.data<double>();
  double total = 0;  // in index order, as global_norm sums
  for (int64_t i = 0; i < squared_norms.numel(); ++i) total += sq[i];
  const double norm = std::sqrt(total);
  double coef = 1.0;
  if (!std::isfinite(norm)) {
    *found_inf.data<float>() = 1.0f;
  } else {
    const double c = max_norm / (norm + 1e-6);
    if (c < 1.0) coef = c;
  }
  out.data<double>()[0] = norm;
  out.data<double>()[1] = coef;
}

void CpuBackend::scale_by(const std::vector<Tensor>& xs, const Tensor& factor) {
  check_control_scalar("scale_by", "factor", factor, kFloat64);
  DP_CHECK(factor.defined(), "scale_by: factor is required");
  const double f = *factor.data<double>();
  if (f == 1.0) return;  // x·1 is x, exactly
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = xs[k];
    DP_CHECK(x.is_contiguous() && x.device().is_cpu(), "scale_by: tensor ", k, " must be contiguous on the CPU, got ",
             x.str());
    dispatch_floating(x.dtype(), "scale_by", [&](auto tag) {
      using T = decltype(tag);
      const T t = static_cast<T>(f);
      T* d = x.data<T>();
      const int64_t n = x.numel();
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) d[i] *= t;
    });
  }
}

}  // namespace dp
