// Fused optimiser updates: one pass over flat buffers.
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

#include <cmath>
#include <initializer_list>
#include <type_traits>

namespace dp {

using namespace cpu;

void CpuBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const SgdParams& p) {
  DP_ASSERT(param.is_contiguous() && grad.is_contiguous() && param.numel() == grad.numel());
  const bool use_momentum = p.momentum != 0.0;
  if (use_momentum) DP_ASSERT(momentum_buf.is_contiguous() && momentum_buf.numel() == param.numel());
  dispatch_floating(param.dtype(), "sgd_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = use_momentum ? momentum_buf.data<T>() : nullptr;
    const T lr = T(p.lr), wd = T(p.weight_decay), mom = T(p.momentum), damp = T(1.0 - p.dampening);
    const int64_t n = param.numel();
    // The options are loop-invariant: pick the loop once so each variant vectorises cleanly.
    auto run = [&](auto with_momentum, auto first, auto nesterov) {
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        T d = g[i] + wd * w[i];
        if constexpr (decltype(with_momentum)::value) {
          const T b = decltype(first)::value ? d : mom * buf[i] + damp * d;
          buf[i] = b;
          d = decltype(nesterov)::value ? d + mom * b : b;
        }
        w[i] -= lr * d;
      }
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
                              const Tensor& exp_avg_sq, const AdamParams& p) {
  check_flat("adamw_update", param, {&grad, &exp_avg, &exp_avg_sq});
  DP_CHECK(p.step >= 1, "adamw_update: step must be >= 1, got ", p.step);
  dispatch_floating(param.dtype(), "adamw_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    const AdamConstants<T> c(p);
    // p·(1 − lr·λ) as p − (lr·λ)·p: rounding the small lr·λ to float32 is harmless, rounding
    // 1 − lr·λ would bias every step by up to 3e-8 relative.
    const T lr_wd = T(p.lr * p.weight_decay);
    const bool divide = p.grad_divisor != 1.0;
    const int64_t n = param.numel();
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = divide ? g[i] * c.inv_divisor : g[i];
      const T mi = c.b1 * m[i] + c.one_minus_b1 * gi;
      const T vi = c.b2 * v[i] + c.one_minus_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      w[i] = w[i] - lr_wd * w[i] - c.step_size * mi / (std::sqrt(vi) / c.bc2_sqrt + c.eps);
    }
  });
}

void CpuBackend::lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                                const Tensor& exp_avg_sq, const Tensor& update, const AdamParams& p) {
  check_flat("lamb_direction", param, {&grad, &exp_avg, &exp_avg_sq, &update});
  DP_CHECK(p.step >= 1, "lamb_direction: step must be >= 1, got ", p.step);
  dispatch_floating(param.dtype(), "lamb_direction", [&](auto tag) {
    using T = decltype(tag);
    const T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    T* u = update.data<T>();
    const AdamConstants<T> c(p);
    const T bc2 = T(1.0 - std::pow(p.beta2, static_cast<double>(p.step)));
    const T divisor = T(p.grad_divisor);
    const int64_t n = param.numel();
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] / divisor;  // apex divides by the clipping factor
      const T mi = c.b1 * m[i] + c.one_minus_b1 * gi;
      const T vi = c.b2 * v[i] + c.one_minus_b2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      u[i] = (mi / c.bc1) / (std::sqrt(vi / bc2) + c.eps) + c.wd * w[i];
    }
  });
}

void CpuBackend::lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                             const LarsParams& p) {
  check_flat("lars_update", param, {&grad, &momentum_buf});
  dispatch_floating(param.dtype(), "lars_update", [&](auto tag) {
    using T = decltype(tag);
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    T* buf = momentum_buf.data<T>();
    const double trust_ratio = p.trust_ratios.defined() ? p.trust_ratios.data<double>()[p.trust_index] : p.trust;
    const T wd = T(p.weight_decay), mom = T(p.momentum), lr = T(p.lr), trust = T(trust_ratio);
    const T scaled_lr = T(p.lr * trust_ratio);
    const int64_t n = param.numel();
    if (p.lr_outside_momentum) {
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const T b = mom * buf[i] + trust * (g[i] + wd * w[i]);
        buf[i] = b;
        w[i] -= lr * b;
      }
    } else {
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        const T b = mom * buf[i] - scaled_lr * (g[i] + wd * w[i]);
        buf[i] = b;
        w[i] += b;
      }
    }
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

}  // namespace dp
