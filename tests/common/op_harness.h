// One op harness for every backend (ggml's tests/test-backend-ops.cpp is the model).
//
// NOTE [ Op harness ]
// A case is {name, the Kernels it exercises, its inputs (shape, values, layout), a function built
// from the public ops (or a Backend entry point called directly), per-mode tolerances}. The same
// table runs three ways (tests/runtime/ops/op_harness_test.cpp):
//   OpHarness/Gradcheck            float64 finite differences on the CPU (differentiable cases);
//   OpHarness/CpuFloat32VsFloat64  forward + backward in float32 vs float64 on the CPU;
//   OpHarness/CudaVsCpu            forward + backward on cuda:0 in every dtype of {float32,
//                                  float64, float16, bfloat16} that the CUDA backend supports for
//                                  all the case's kernels, vs the CPU in float64 (skips when no
//                                  GPU is visible).
// Inputs are generated once per case in float64 (int64 for indices) and rounded to the dtype under
// test; the float64 reference runs on those rounded values, so a comparison measures the kernels'
// arithmetic, not the rounding of the inputs. Each input is then laid out as its spec says: a
// transposed view (noncontiguous_copy), or a view narrowed out of a wider buffer whose margins
// hold NaN, at an odd element offset (a kernel reading outside its view, or assuming 16-byte
// alignment, shows up). Outputs and input gradients are compared whole: the norm-relative error
// ‖a − b‖/‖b‖ against the tolerance, every element within 10× the tolerance of its reference
// (scaled by |b_i| + rms(b), so one forgotten element fails even in a large tensor), no NaN/Inf
// where the reference is finite, shapes equal, integer outputs (argmax, pool indices) exact.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/core/runtime.h"
#include "runtime/tensor/tensor.h"

namespace dp::testing::harness {

// How an input's values are drawn (always from the case's fixed seed).
enum class Values : uint8_t {
  Uniform,   // float64 uniform in [low, high)
  Distinct,  // no two equal, exact in float16 and bfloat16, |v| in (~1e-3, 4): max/argmax have no ties
  Indices,   // int64 uniform integers in [low, high) (or `fixed`), never requires grad
};

// How an input is laid out when the function receives it.
enum class Layout : uint8_t {
  Contiguous,
  Transposed,  // same values, first and last dims' strides swapped (1-D: stride 2); noncontiguous_copy
  Narrowed,    // a view of a buffer 3 elements wider in the last dim, starting at element 1; the
               // margins hold NaN
  ChannelsLast,  // 4-D, NHWC in memory (NOTE [ Channels-last ]); the float64 reference of a
                 // comparison gets it NCHW-contiguous, so the two formats' kernels meet
};

struct InputSpec {
  std::string name;
  Shape shape;
  Values values = Values::Uniform;
  double low = -1.0, high = 1.0;
  Layout layout = Layout::Contiguous;
  bool requires_grad = true;
  bool keep_float64 = false;     // stays float64 whatever dtype the case runs in (mixed-dtype ops)
  std::vector<int64_t> fixed;    // Indices: these values instead of random ones (shape's numel)

  InputSpec() = default;
  InputSpec(std::string name_, Shape shape_) : name(std::move(name_)), shape(std::move(shape_)) {}
  InputSpec range(double lo, double hi) const { InputSpec s = *this; s.low = lo; s.high = hi; return s; }
  InputSpec positive() const { return range(0.5, 2.0); }
  InputSpec distinct() const { InputSpec s = *this; s.values = Values::Distinct; return s; }
  InputSpec transposed() const { InputSpec s = *this; s.layout = Layout::Transposed; return s; }
  InputSpec narrowed() const { InputSpec s = *this; s.layout = Layout::Narrowed; return s; }
  InputSpec channels_last() const { InputSpec s = *this; s.layout = Layout::ChannelsLast; return s; }
  InputSpec no_grad() const { InputSpec s = *this; s.requires_grad = false; return s; }
  InputSpec float64() const { InputSpec s = *this; s.keep_float64 = true; return s; }
};

// An int64 index input with values in [0, bound), or the given ones.
InputSpec indices(std::string name, Shape shape, int64_t bound, std::vector<int64_t> fixed = {});

// Tolerances per mode. Gradcheck: |numeric − analytic| ≤ atol + rtol·|numeric| per element.
// Comparisons: norm-relative error per dtype (elements: 10× that, see NOTE [ Op harness ]).
struct Tolerance {
  double gc_eps = 1e-6, gc_atol = 1e-7, gc_rtol = 1e-5;
  double f32 = 1e-5;   // float32 (CPU float32 vs float64, and CUDA float32 vs CPU float64)
  double f64 = 1e-12;  // CUDA float64 vs CPU float64
  double f16 = 1e-2;
  double bf16 = 3e-2;

  double for_dtype(DType dtype) const;
  // Every comparison tolerance times `factor` (long reductions, cancellation-prone gradients).
  Tolerance scaled(double factor) const;
  Tolerance gradcheck(double atol, double rtol) const;
};

// The function of a case: inputs (laid out and typed as the run needs) → outputs. When the case
// is differentiable, outputs[0] is differentiated (backward with a fixed random upstream gradient
// into every input that requires grad); every output is compared (running statistics, indices,
// updated optimiser buffers).
using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct OpCase {
  std::string name;              // a GoogleTest parameter name: [A-Za-z0-9_]
  std::vector<Kernel> kernels;   // what the case exercises; supports() decides the dtypes run
  std::vector<InputSpec> inputs;
  OpFn fn;
  bool differentiable = true;    // false: forward-only (modes 2 and 3 only)
  Tolerance tol = {};
  // Mode 1 only, when set: a function whose gradient is the true derivative where `fn`'s is not
  // by definition (embedding's padding row gets none: gradcheck masks those rows out).
  OpFn gradcheck_fn = {};
};

void PrintTo(const OpCase& c, std::ostream* os);

// The CPU device and the process-wide runtime the harness runs on (cuda(0) is created on first
// use, and only when a GPU is visible).
Runtime& runtime();

// The dtypes among {float32, float64, float16, bfloat16} that `backend` supports for every kernel
// of the case.
std::vector<DType> supported_dtypes(Backend& backend, const OpCase& c);

// Mode 1: empty on success, else gradcheck's description.
std::string run_gradcheck(const OpCase& c);
// Mode 2 (dtype float32) and mode 3 (device cuda:0): runs the case on `device` in `dtype` and on
// the CPU in float64 with the same (rounded) inputs; empty on success, else every mismatch named
// by case, dtype, tensor and worst element.
std::string run_comparison(const OpCase& c, Device device, DType dtype);

// `out`, after checking that it kept `in`'s channels-last format (an op that drops it fails the
// case with a message naming both).
Tensor kept_format(const Tensor& in, const Tensor& out);

// Readable parameter names (the case's name).
struct CaseName {
  std::string operator()(const ::testing::TestParamInfo<OpCase>& info) const { return info.param.name; }
};

// The table (tests/runtime/ops/op_harness_*_test.cpp): each family's cases.
std::vector<OpCase> pointwise_cases();
std::vector<OpCase> reduction_matmul_cases();
std::vector<OpCase> conv_pool_cases();
std::vector<OpCase> norm_loss_cases();
std::vector<OpCase> optimizer_cases();

}  // namespace dp::testing::harness
