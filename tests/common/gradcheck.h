// Finite-difference gradient checking in float64 (flashlight's AutogradTestUtils, our way).
//
// gradcheck(fn, inputs) reduces fn's output to a scalar with fixed random weights, runs
// backward, and compares each input's gradient with central differences element by element.
// Inputs may be non-contiguous views (use noncontiguous_copy) or broadcast operands.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

namespace dp::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
};

// Returns an empty string on success, else a description of the first mismatches.
std::string gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                      std::vector<Tensor> inputs, const GradcheckOptions& options = {});

// Same values as `t`, laid out non-contiguously (a transposed view of a permuted buffer),
// requiring grad like `t`.
Tensor noncontiguous_copy(const Tensor& t);

// Same values as the 4-D `t`, laid out channels-last (a fresh leaf, requiring grad like `t`).
Tensor channels_last_copy(const Tensor& t);

// Uniform random float64 tensor on the CPU requiring grad.
Tensor random_input(const Shape& shape, Generator& gen, Device device, double low = -1.0, double high = 1.0);

}  // namespace dp::testing

#define EXPECT_GRADCHECK(...)                         \
  do {                                                \
    std::string gradcheck_msg = __VA_ARGS__;          \
    EXPECT_TRUE(gradcheck_msg.empty()) << gradcheck_msg; \
  } while (0)
