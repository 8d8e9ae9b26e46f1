#include "common/gradcheck.h"

#include <cmath>
#include <sstream>

#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace dp::testing {

namespace {

// Pointer to element `linear` (row-major index) of a CPU tensor with any strides.
double* element(const Tensor& t, int64_t linear) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (linear % t.shape()[d]) * t.strides()[d];
    linear /= t.shape()[d];
  }
  return static_cast<double*>(t.storage()->data()) + t.offset() + off;
}

}  // namespace

std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, std::vector<Tensor> inputs,
                      const GradcheckOptions& o) {
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad() && t.dtype() != kFloat64) return "gradcheck: inputs must be float64";
  }
  Tensor probe = fn(inputs);
  Generator gen(1234);
  Tensor weights = rand(probe.shape(), gen, kFloat64, probe.device(), 0.5, 1.5);
  auto scalar_loss = [&]() { return sum(mul(fn(inputs), weights)); };

  for (Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
  scalar_loss().backward();

  std::ostringstream errors;
  int reported = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad()) continue;
    Tensor analytic = t.grad();
    if (!analytic.defined()) {
      errors << "input " << i << ": no gradient was computed\n";
      continue;
    }
    std::vector<double> ga = analytic.to_vector<double>();
    NoGradGuard no_grad;
    for (int64_t k = 0; k < t.numel(); ++k) {
      double* p = element(t, k);
      const double orig = *p;
      *p = orig + o.eps;
      double up = scalar_loss().item<double>();
      *p = orig - o.eps;
      double down = scalar_loss().item<double>();
      *p = orig;
      double numeric = (up - down) / (2 * o.eps);
      if (std::abs(numeric - ga[k]) > o.atol + o.rtol * std::abs(numeric)) {
        if (reported++ < 8)
          errors << "input " << i << " " << t.str() << " element " << k << ": analytic " << ga[k]
                 << " vs numeric " << numeric << "\n";
      }
    }
  }
  return errors.str();
}

Tensor channels_last_copy(const Tensor& t) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = Tensor::empty(t.shape(), t.dtype(), t.device(), MemoryFormat::ChannelsLast);
    out.copy_(t.detach());
  }
  if (t.requires_grad()) out.set_requires_grad(true);
  return out;
}

Tensor noncontiguous_copy(const Tensor& t) {
  NoGradGuard no_grad;
  Tensor out;
  if (t.dim() >= 2) {
    // Store the transpose contiguously, then view it transposed back: same values, swapped strides.
    Tensor tr = t.detach().transpose(0, t.dim() - 1).contiguous();
    out = tr.transpose(0, t.dim() - 1);
  } else {
    // 1-D: every other element of a buffer twice as long.
    Tensor buf = zeros({t.numel() * 2}, t.dtype(), t.device());
    Tensor strided = buf.view({t.numel(), 2}).select(1, 0);
    strided.copy_(t.detach());
    out = strided;
  }
  out = out.detach();
  if (t.requires_grad()) out.set_requires_grad(true);
  return out;
}

Tensor random_input(const Shape& shape, Generator& gen, Device device, double low, double high) {
  Tensor t = rand(shape, gen, kFloat64, device, low, high);
  t.set_requires_grad(true);
  return t;
}

}  // namespace dp::testing
