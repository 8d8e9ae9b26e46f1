#include "common/batch_norm_kink.h"

#include <random>

#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/norm.h"

namespace dp::testing {
namespace {

std::vector<double> host_values(const Tensor& t, Device host) {
  return t.to(kFloat64).contiguous().to(host).to_vector<double>();
}

// −(kink − mean)·(invstd·w) rounded as the statistics type C rounds each step.
template <typename C>
double kink_bias(double kink, double mean, double invstd, double w) {
  const C d = static_cast<C>(kink) - static_cast<C>(mean);
  const C scale = static_cast<C>(invstd) * static_cast<C>(w);
  const C product = d * scale;
  return -static_cast<double>(product);
}

}  // namespace

BatchNormKinkCase batch_norm_kink_case(Device device, Device host, DType dtype, MemoryFormat format,
                                       const Shape& shape, uint64_t seed, double eps) {
  const int64_t C = shape[1];
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t S = numel / (shape[0] * C);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> quarter(-8, 8);
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  BatchNormKinkCase c;
  std::vector<double> x(numel), upstream(numel), weight(C);
  for (double& v : x) v = quarter(rng) / 4.0;
  for (double& v : upstream) v = unit(rng) * 2 - 1;
  for (double& v : weight) v = 0.5 + unit(rng);
  for (int64_t ch = 0; ch < C; ++ch) c.kink.push_back(((ch % 9) - 4) / 4.0);
  for (int64_t i = 0; i < numel; ++i) c.at_kink += x[i] == c.kink[(i / S) % C];

  const DType stats = compute_dtype(dtype);
  c.x = from_vector<double>(x, shape, host).to(dtype).to(device).contiguous(format);
  c.upstream = from_vector<double>(upstream, shape, host).to(dtype).to(device).contiguous(format);
  c.weight = from_vector<double>(weight, {C}, host).to(stats).to(device);

  // The statistics as the device's backend saves them (the bias does not change them).
  Tensor y = Tensor::empty(shape, dtype, device, format);
  Tensor save_mean = Tensor::empty({C}, stats, device), save_invstd = Tensor::empty({C}, stats, device);
  device.backend().batch_norm_forward(c.x, c.weight, Tensor(), Tensor(), Tensor(), y, save_mean, save_invstd, true,
                                      0.1, eps, {});
  const std::vector<double> mean = host_values(save_mean, host), invstd = host_values(save_invstd, host);
  const std::vector<double> w = host_values(c.weight, host);
  std::vector<double> bias(C);
  for (int64_t ch = 0; ch < C; ++ch)
    bias[ch] = stats == kFloat64 ? kink_bias<double>(c.kink[ch], mean[ch], invstd[ch], w[ch])
                                 : kink_bias<float>(c.kink[ch], mean[ch], invstd[ch], w[ch]);
  c.bias = from_vector<double>(bias, {C}, host).to(stats).to(device);
  return c;
}

std::vector<std::vector<double>> batch_norm_relu_step(const BatchNormKinkCase& c, Device host, bool fused,
                                                      double eps) {
  const MemoryFormat format = c.x.suggest_memory_format();
  Tensor x = c.x.clone().contiguous(format), w = c.weight.clone(), b = c.bias.clone();
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  Tensor y = fused ? batch_norm_add_relu(x, Tensor(), w, b, Tensor(), Tensor(), true, 0.1, eps)
                   : relu(batch_norm(x, w, b, Tensor(), Tensor(), true, 0.1, eps));
  y.backward(c.upstream);
  std::vector<std::vector<double>> out;
  for (const Tensor& t : {y, x.grad(), w.grad(), b.grad()}) out.push_back(host_values(t, host));
  return out;
}

KinkOutcomes kink_outcomes(const BatchNormKinkCase& c, Device host, const std::vector<double>& y) {
  const std::vector<double> x = host_values(c.x, host);
  const int64_t C = c.x.size(1), S = c.x.numel() / (c.x.size(0) * C);
  KinkOutcomes o;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] == c.kink[(static_cast<int64_t>(i) / S) % C]) (y[i] > 0 ? o.positive : o.zero) += 1;
  return o;
}

}  // namespace dp::testing
