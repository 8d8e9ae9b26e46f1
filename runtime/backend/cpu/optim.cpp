// Fused optimiser updates: one pass over flat buffers.
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

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
