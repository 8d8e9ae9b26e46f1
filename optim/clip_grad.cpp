#include "optim/clip_grad.h"

#include <cmath>

#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/backend.h"
#include "runtime/ops/creation.h"

namespace dp {

std::vector<double> squared_norms(const std::vector<Tensor>& xs) {
  if (xs.empty()) return {};
  const Device device = xs.front().device();
  std::vector<Tensor> flat;
  flat.reserve(xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    DP_CHECK(xs[k].device() == device, "squared_norms: tensor ", k, " is on ", xs[k].device().str(),
             ", tensor 0 on ", device.str(), " (one device per call)");
    flat.push_back(xs[k].contiguous());
  }
  Tensor out = Tensor::empty({static_cast<int64_t>(xs.size())}, kFloat64, device);
  device.backend().squared_norms(flat, out);
  return out.to_vector<double>();
}

namespace {
std::vector<Tensor> grads_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}
}  // namespace

double global_norm(const std::vector<Tensor>& xs) {
  double total = 0;
  for (double s : squared_norms(xs)) total += s;
  return std::sqrt(total);
}

double grad_norm(const std::vector<Tensor>& params) { return global_norm(grads_of(params)); }

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  DP_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(params);
  const double norm = global_norm(grads);
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0) {
    for (Tensor g : grads) {
      if (g.is_contiguous()) {
        g.device().backend().binary_scalar(BinaryOp::Mul, g, coef, g);  // elementwise: in place is safe
        g.bump_version();
      } else {
        Tensor scaled = Tensor::empty(g.shape(), g.dtype(), g.device());
        g.device().backend().binary_scalar(BinaryOp::Mul, g, coef, scaled);
        g.copy_(scaled);
      }
    }
  }
  return norm;
}

Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& params, double max_norm, const Tensor& found_inf) {
  DP_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be > 0, got ", max_norm);
  DP_CHECK(found_inf.defined(), "clip_grad_norm_on_device_: found_inf is required");
  NoGradGuard no_grad;
  const Device device = found_inf.device();
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DP_CHECK(g.device() == device, "clip_grad_norm_on_device_: a gradient is on ", g.device().str(),
             " but found_inf on ", device.str());
    if (!g.is_contiguous()) {  // scaled in place below: make it contiguous once, as the scaler does
      g = g.contiguous();
      Tensor param = p;
      param.set_grad(g);
    }
    grads.push_back(g);
  }
  Tensor squared = Tensor::empty({static_cast<int64_t>(grads.size())}, kFloat64, device);
  if (!grads.empty()) device.backend().squared_norms(grads, squared);
  Tensor norm_and_coef = Tensor::empty({2}, kFloat64, device);
  device.backend().clip_coefficient(squared, max_norm, found_inf, norm_and_coef);
  device.backend().scale_by(grads, norm_and_coef.narrow(0, 1, 1));
  for (const Tensor& g : grads) g.bump_version();
  return norm_and_coef.narrow(0, 0, 1).reshape({});
}

}  // namespace dp
