#include "runtime/nn/init.h"

#include <cmath>

#include "runtime/autograd/grad_mode.h"
#include "runtime/core/error.h"
#include "runtime/ops/creation.h"

namespace dp::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight) {
  DP_CHECK(weight.dim() >= 2, "fan_in_and_fan_out: needs a tensor with at least 2 dims, got ", weight.str());
  int64_t receptive_field = 1;
  for (int64_t d = 2; d < weight.dim(); ++d) receptive_field *= weight.size(d);
  return {weight.size(1) * receptive_field, weight.size(0) * receptive_field};
}

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

namespace {
// gain / √fan: the standard deviation Kaiming initialisation aims for.
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const int64_t fan = mode == FanMode::FanIn ? fan_in : fan_out;
  DP_CHECK(fan > 0, "kaiming init: zero fan for ", t.str());
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

void kaiming_uniform_(Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nonlinearity) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  init::uniform_(t, gen, -bound, bound);
}

void kaiming_normal_(Tensor& t, Generator& gen, double a, FanMode mode, Nonlinearity nonlinearity) {
  init::normal_(t, gen, 0.0, kaiming_std(t, a, mode, nonlinearity));
}

void uniform_(Tensor& t, Generator& gen, double low, double high) {
  NoGradGuard no_grad;
  dp::uniform_(t, gen, low, high);
}

void normal_(Tensor& t, Generator& gen, double mean, double std) {
  NoGradGuard no_grad;
  dp::normal_(t, gen, mean, std);
}

void constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  t.fill_(value);
}

void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

void linear_default_(Tensor& weight, Tensor& bias, Generator& gen) {
  kaiming_uniform_(weight, gen, std::sqrt(5.0));
  if (!bias.defined()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in_and_fan_out(weight).first));
  init::uniform_(bias, gen, -bound, bound);
}

}  // namespace dp::nn::init
