// Shared by the optimiser tests: a parameter set in two groups and a float64 reference to run
// beside the optimiser under test.
//
// Group 0: a [3, 4] matrix, a [200, 200] matrix (above the CPU kernels' parallel grain) and a
// [5, 2] matrix that first gets a gradient at step 3; group 1 (the "excluded" kind: its own lr,
// weight decay 0, adapt = false): a [6] vector and a [2] vector that never gets a gradient.
// In float64, gradients depend on the reference's current parameters and on the step, so
// trajectories diverge on any mistake; the optimiser under test gets them rounded to its dtype,
// and so does the reference. In float32 they depend on the step and position only: fed back
// through cos(k·p), one-ulp differences would grow over 60 steps whatever the implementation.
//
// For float32 the reference computes in float64 but stores what it writes (parameters, moments,
// momentum) through stored(), rounded to float32 as the optimiser stores them: the comparison
// then measures the update's arithmetic (within 1e-6), not the rounding a float32 parameter
// accumulates over 60 steps in any implementation (about 1e-6 by itself).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/ops/creation.h"

namespace dp::testing {

using Values = std::vector<double>;

class OptimHarness {
 public:
  OptimHarness(Device device, DType dtype, double lr0, double wd0, double lr1, uint64_t seed = 7)
      : device_(device), dtype_(dtype) {
    Generator gen(seed);
    const std::vector<std::vector<Shape>> shapes = {{{3, 4}, {200, 200}, {5, 2}}, {{6}, {2}}};
    groups.push_back(ParamGroup{{}, lr0, wd0, true});
    groups.push_back(ParamGroup{{}, lr1, 0.0, false});
    ref.resize(2);
    for (size_t g = 0; g < 2; ++g)
      for (const Shape& s : shapes[g]) {
        Tensor p = randn(s, gen, dtype, device).set_requires_grad(true);
        groups[g].params.push_back(p);
        ref[g].push_back(p.to_vector<double>());
      }
  }

  // Whether parameter (g, i) has a gradient at `step`.
  static bool has_grad(size_t g, size_t i, int step) {
    if (g == 0 && i == 2) return step >= 3;
    if (g == 1 && i == 1) return false;
    return true;
  }

  // The gradients of `step` ([g][i], empty where none), rounded to the dtype and set on the
  // parameters; `scale` multiplies them.
  std::vector<std::vector<Values>> set_grads(int step, double scale = 1.0) {
    std::vector<std::vector<Values>> grads(2);
    for (size_t g = 0; g < 2; ++g) {
      grads[g].resize(ref[g].size());
      for (size_t i = 0; i < ref[g].size(); ++i) {
        if (!has_grad(g, i, step)) continue;
        Values v(ref[g][i].size());
        for (size_t j = 0; j < v.size(); ++j)
          v[j] = scale * (dtype_ == kFloat64 ? std::cos((1 + 0.1 * step) * ref[g][i][j])
                                             : std::cos(1 + 0.1 * step + 0.37 * static_cast<double>(j) + 0.5 * static_cast<double>(i))) +
                 scale * 0.01 * static_cast<double>(j % 7);
        if (dtype_ == kFloat32)
          for (double& x : v) x = static_cast<double>(static_cast<float>(x));
        groups[g].params[i].set_grad(from_vector(v, groups[g].params[i].shape(), device_).to(dtype_));
        grads[g][i] = std::move(v);
      }
    }
    return grads;
  }

  // x as the optimiser under test stores it (rounded to float32 for a float32 run).
  double stored(double x) const { return dtype_ == kFloat32 ? static_cast<double>(static_cast<float>(x)) : x; }

  // Every parameter within tol · (1 + |reference|) of the reference.
  void expect_matches(double tol, const std::string& what) const {
    for (size_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < ref[g].size(); ++i) {
        const Values got = groups[g].params[i].to_vector<double>();
        double worst = 0;
        size_t at = 0;
        for (size_t j = 0; j < got.size(); ++j) {
          const double err = std::abs(got[j] - ref[g][i][j]) / (1 + std::abs(ref[g][i][j]));
          if (err > worst) worst = err, at = j;
        }
        EXPECT_LE(worst, tol) << what << ": group " << g << " parameter " << i << " element " << at << ": got "
                              << got[at] << ", reference " << ref[g][i][at];
      }
  }

  std::vector<ParamGroup> groups;
  std::vector<std::vector<Values>> ref;  // [g][i], the reference's parameter values

 private:
  Device device_;
  DType dtype_;
};

inline double norm_of(const Values& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace dp::testing
