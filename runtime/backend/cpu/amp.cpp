// Dynamic loss scaling kernels (backend.h, amp_unscale_and_check / amp_update_scale): the CPU
// forms of PyTorch's _amp_foreach_non_finite_check_and_unscale_ and _amp_update_scale_.
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

namespace dp {

using namespace cpu;

namespace {

void check_amp_scalar(const char* op, const char* what, const Tensor& t, DType dtype) {
  DP_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device().is_cpu(), op, ": ", what,
           " must be a one-element ", dtype_name(dtype), " tensor on the CPU, got ",
           t.defined() ? t.str() : std::string("an undefined tensor"));
}

}  // namespace

void CpuBackend::amp_unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                       const Tensor& scale) {
  check_amp_scalar("amp_unscale_and_check", "found_inf", found_inf, kFloat32);
  check_amp_scalar("amp_unscale_and_check", "scale", scale, kFloat32);
  const float inv = static_cast<float>(1.0 / static_cast<double>(*scale.data<float>()));
  bool any_nonfinite = false;
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor& g = grads[k];
    DP_CHECK(g.is_contiguous() && g.device().is_cpu(), "amp_unscale_and_check: gradient ", k,
             " must be contiguous on the CPU, got ", g.str());
    const bool nonfinite = dispatch_floating(g.dtype(), "amp_unscale_and_check", [&](auto tag) {
      using T = decltype(tag);
      // PyTorch's opmath: float for float32, double for float64 (inv_scale widened exactly).
      const T factor = static_cast<T>(inv);
      T* d = g.data<T>();
      const int64_t n = g.numel();
      int bad = 0;  // bitwise, not ||: a short-circuit keeps the loop scalar
#pragma omp parallel for simd num_threads(num_threads_) schedule(static) reduction(| : bad) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        bad |= !std::isfinite(d[i]);
        d[i] *= factor;
      }
      return bad != 0;
    });
    any_nonfinite = any_nonfinite || nonfinite;
  }
  if (any_nonfinite) *found_inf.data<float>() = 1.0f;
}

void CpuBackend::amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                  double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_amp_scalar("amp_update_scale", "scale", scale, kFloat32);
  check_amp_scalar("amp_update_scale", "growth_tracker", growth_tracker, kInt32);
  check_amp_scalar("amp_update_scale", "found_inf", found_inf, kFloat32);
  DP_CHECK(growth_interval >= 1 && growth_interval <= INT32_MAX, "amp_update_scale: growth_interval must be in [1, ",
           INT32_MAX, "], got ", growth_interval);
  float& s = *scale.data<float>();
  int32_t& tracker = *growth_tracker.data<int32_t>();
  if (*found_inf.data<float>() != 0.0f) {
    s = static_cast<float>(static_cast<double>(s) * backoff_factor);
    tracker = 0;
    return;
  }
  const int64_t successful = static_cast<int64_t>(tracker) + 1;
  if (successful == growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(s) * growth_factor);
    if (std::isfinite(grown)) s = grown;  // the scale never becomes inf
    tracker = 0;
  } else {
    tracker = static_cast<int32_t>(successful);
  }
}

}  // namespace dp
