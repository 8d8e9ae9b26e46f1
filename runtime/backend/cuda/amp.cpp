// Front-ends of the CUDA loss-scaling kernels (amp.cu): operand checks, then one launcher call.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/cuda/amp_kernels.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"

namespace dp::cuda {

namespace {

void check_amp_scalar(const char* op, const char* what, const Tensor& t, DType dtype) {
  DP_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype, op, ": ", what, " must be a one-element ",
           dtype_name(dtype), " tensor, got ", t.defined() ? t.str() : std::string("an undefined tensor"));
}

}  // namespace

void CudaBackend::amp_unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                        const Tensor& scale) {
  check_amp_scalar("amp_unscale_and_check", "found_inf", found_inf, kFloat32);
  check_amp_scalar("amp_unscale_and_check", "scale", scale, kFloat32);
  check_operand("amp_unscale_and_check", found_inf);
  check_operand("amp_unscale_and_check", scale);
  std::vector<UnscaleInput> inputs(grads.size());
  for (size_t k = 0; k < grads.size(); ++k) {
    const Tensor& g = grads[k];
    check_operand("amp_unscale_and_check", g);
    check_supported(Kernel::AmpUnscaleAndCheck, g.dtype());
    DP_CHECK(g.is_contiguous(), "amp_unscale_and_check: gradient ", k, " must be contiguous, got ", g.str());
    inputs[k] = UnscaleInput{g.raw_data(), g.numel(), g.dtype()};
  }
  if (grads.empty()) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_amp_unscale_and_check(inputs.data(), static_cast<int64_t>(inputs.size()), found_inf.data<float>(),
                                             scale.data<float>(), stream_),
                "amp_unscale_and_check over ", grads.size(), " gradients");
}

void CudaBackend::amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                   double growth_factor, double backoff_factor, int64_t growth_interval) {
  check_amp_scalar("amp_update_scale", "scale", scale, kFloat32);
  check_amp_scalar("amp_update_scale", "growth_tracker", growth_tracker, kInt32);
  check_amp_scalar("amp_update_scale", "found_inf", found_inf, kFloat32);
  for (const Tensor* t : {&scale, &growth_tracker, &found_inf}) check_operand("amp_update_scale", *t);
  DP_CHECK(growth_interval >= 1 && growth_interval <= INT32_MAX, "amp_update_scale: growth_interval must be in [1, ",
           INT32_MAX, "], got ", growth_interval);
  activate();
  DP_CUDA_CHECK(device_,
                launch_amp_update_scale(scale.data<float>(), growth_tracker.data<int32_t>(), found_inf.data<float>(),
                                        growth_factor, backoff_factor, growth_interval, stream_),
                "amp_update_scale");
}

}  // namespace dp::cuda
