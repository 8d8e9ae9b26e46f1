#include "optim/grad_scaler.h"

#include <cmath>
#include <limits>

#include "optim/optimizer.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"

namespace dp {

GradScaler::GradScaler(Device device, const GradScalerOptions& options) : options_(options) {
  const GradScalerOptions& o = options_;
  const double max_float = std::numeric_limits<float>::max();
  DP_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0 && o.init_scale <= max_float,
           "GradScaler: init_scale must be a positive finite float32 value, got ", o.init_scale);
  DP_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ",
           o.growth_factor);
  DP_CHECK(std::isfinite(o.backoff_factor) && o.backoff_factor > 0 && o.backoff_factor < 1.0,
           "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  DP_CHECK(o.growth_interval >= 1 && o.growth_interval <= std::numeric_limits<int32_t>::max(),
           "GradScaler: growth_interval must be in [1, 2147483647], got ", o.growth_interval);
  scale_ = scalar_tensor(o.init_scale, kFloat32, device);
  growth_tracker_ = scalar_tensor(0, kInt32, device);
  found_inf_ = scalar_tensor(0, kFloat32, device);
  skipped_total_ = scalar_tensor(0, kInt64, device);
  skip_run_ = scalar_tensor(0, kInt64, device);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  DP_CHECK(loss.device() == scale_.device(), "GradScaler::scale: the loss is on ", loss.device().str(),
           " but the scaler on ", scale_.device().str());
  return mul(loss, loss.dtype() == kFloat32 ? scale_ : scale_.to(loss.dtype()));
}

void GradScaler::unscale(const std::vector<Tensor>& params) {
  if (!options_.enabled) return;
  DP_CHECK(!unscaled_, "GradScaler::unscale: already called since the last update() (once per step)");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!g.is_contiguous()) {
      g = g.contiguous();
      Tensor param = p;  // a handle to the same parameter
      param.set_grad(g);
    }
    grads.push_back(g);
  }
  scale_.device().backend().amp_unscale_and_check(grads, found_inf_, scale_);
  for (const Tensor& g : grads) g.bump_version();
  unscaled_ = true;
}

void GradScaler::step(Optimizer& optimizer, const Tensor& lr) {
  if (options_.enabled && !unscaled_) {
    std::vector<Tensor> params;
    for (const ParamGroup& g : optimizer.param_groups()) params.insert(params.end(), g.params.begin(), g.params.end());
    unscale(params);
  }
  optimizer.step(DeviceStep{found_inf_, lr});
}

bool GradScaler::step_skipped() const { return found_inf_.item<float>() != 0.0f; }

void GradScaler::update() {
  Backend& backend = scale_.device().backend();
  if (options_.enabled)
    backend.amp_update_scale(scale_, growth_tracker_, found_inf_, options_.growth_factor, options_.backoff_factor,
                             options_.growth_interval);
  backend.count_steps({skipped_total_}, found_inf_, StepCounting::IfSkipped);
  backend.count_steps({skip_run_}, found_inf_, StepCounting::SkipRun);
  found_inf_.zero_();
  unscaled_ = false;
}

int64_t GradScaler::skipped_steps() const { return skipped_total_.item<int64_t>(); }

int64_t GradScaler::skipped_in_a_row() const { return skip_run_.item<int64_t>(); }

double GradScaler::get_scale() const { return scale_.item<float>(); }

int64_t GradScaler::growth_tracker() const { return growth_tracker_.item<int32_t>(); }

std::vector<std::pair<std::string, Tensor>> GradScaler::state_dict() const {
  return {{"scale", scale_.clone()}, {"growth_tracker", growth_tracker_.clone()}};
}

void GradScaler::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  bool have_scale = false, have_tracker = false;
  for (const auto& [name, t] : state) {
    DP_CHECK(t.defined() && t.numel() == 1, "GradScaler::load_state_dict: '", name, "' must have one element, got ",
             t.defined() ? t.str() : std::string("an undefined tensor"));
    if (name == "scale") {
      DP_CHECK(t.dtype() == kFloat32, "GradScaler::load_state_dict: 'scale' must be float32, got ", t.str());
      const float s = t.item<float>();
      DP_CHECK(std::isfinite(s) && s > 0, "GradScaler::load_state_dict: 'scale' must be positive and finite, got ", s);
      scale_.copy_(t.reshape({}));
      have_scale = true;
    } else if (name == "growth_tracker") {
      DP_CHECK(t.dtype() == kInt32, "GradScaler::load_state_dict: 'growth_tracker' must be int32, got ", t.str());
      const int32_t n = t.item<int32_t>();
      DP_CHECK(n >= 0 && n < options_.growth_interval, "GradScaler::load_state_dict: 'growth_tracker' must be in [0, ",
               options_.growth_interval, ") (growth_interval), got ", n);
      growth_tracker_.copy_(t.reshape({}));
      have_tracker = true;
    } else {
      throw Error(detail::concat("GradScaler::load_state_dict: unknown entry '", name,
                                 "' (expected 'scale' and 'growth_tracker')"));
    }
  }
  DP_CHECK(have_scale && have_tracker, "GradScaler::load_state_dict: missing '", have_scale ? "growth_tracker" : "scale",
           "'");
  found_inf_.zero_();
  unscaled_ = false;
}

}  // namespace dp
