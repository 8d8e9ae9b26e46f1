// Parameter initialisers, as torch.nn.init. Each fills its tensor in place from an explicit
// Generator (no global RNG), under NoGradGuard, so it works on registered parameters.
#pragma once

#include <cstdint>
#include <utility>

#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

namespace dp::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Sigmoid, Tanh, ReLU, LeakyReLU };

// {fan_in, fan_out} of a weight [out, in, *kernel]: in·∏kernel and out·∏kernel (torch's
// _calculate_fan_in_and_fan_out). Needs at least 2 dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& weight);
// torch.nn.init.calculate_gain; `param` is LeakyReLU's negative slope.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// U(-bound, bound) with bound = gain·√(3/fan), gain from `nonlinearity` (slope a for LeakyReLU).
// With a = √5 (torch's Linear/Conv default) the bound is 1/√fan_in.
void kaiming_uniform_(Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::FanIn,
                      Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// N(0, std²) with std = gain/√fan. torchvision's ResNet: mode FanOut, nonlinearity ReLU.
void kaiming_normal_(Tensor& t, Generator& gen, double a = 0.0, FanMode mode = FanMode::FanIn,
                     Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
void uniform_(Tensor& t, Generator& gen, double low = 0.0, double high = 1.0);
void normal_(Tensor& t, Generator& gen, double mean = 0.0, double std = 1.0);
void constant_(Tensor& t, double value);
void zeros_(Tensor& t);
void ones_(Tensor& t);

// torch's Linear/Conv reset_parameters(): weight kaiming_uniform_(a = √5), i.e.
// U(-1/√fan_in, 1/√fan_in), and the bias (when defined) from the same range.
void linear_default_(Tensor& weight, Tensor& bias, Generator& gen);

}  // namespace dp::nn::init
