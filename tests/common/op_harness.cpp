// The op harness's machinery: inputs, runs, comparisons (NOTE [ Op harness ] in op_harness.h).
#include "common/op_harness.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/gradcheck.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops/creation.h"

namespace dp::testing::harness {

namespace {

const DType kComparedDtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// A stable seed per case name (FNV-1a), so adding a case never changes another case's inputs.
uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  return h;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The values of one input, contiguous on the CPU: float64, or int64 for indices.
Tensor base_values(const InputSpec& s, Generator& gen, uint64_t& perm_state) {
  Device cpu = runtime().cpu();
  const int64_t n = numel_of(s.shape);
  // No values to draw (and rand() rejects some empty shapes: NOTE in op_harness_test.cpp).
  if (n == 0) return Tensor::empty(s.shape, s.values == Values::Indices ? kInt64 : kFloat64, cpu);
  switch (s.values) {
    case Values::Uniform: return rand(s.shape, gen, kFloat64, cpu, s.low, s.high);
    case Values::Indices: {
      std::vector<int64_t> v = s.fixed;
      if (v.empty()) {
        const int64_t lo = static_cast<int64_t>(s.low), span = static_cast<int64_t>(s.high) - lo;
        DP_CHECK(span >= 1, "op harness: input ", s.name, " has an empty index range");
        for (int64_t i = 0; i < n; ++i) v.push_back(lo + static_cast<int64_t>(splitmix64(perm_state) % span));
      }
      DP_CHECK(static_cast<int64_t>(v.size()) == n, "op harness: input ", s.name, " has ", v.size(),
               " fixed values for shape ", shape_str(s.shape));
      return from_vector(v, s.shape, cpu);
    }
    case Values::Distinct: {
      // A random permutation p of [0, n) mapped bijectively to ±(128 + m)·2^(e − E) with
      // m = (p/2) mod 128, e = p/256: 8 significant bits (exact in bfloat16 and float16), all
      // distinct, |v| < 4, and neighbours at least 2^−E apart (far beyond gradcheck's eps).
      std::vector<int64_t> perm(static_cast<size_t>(n));
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t i = n - 1; i > 0; --i)
        std::swap(perm[i], perm[splitmix64(perm_state) % static_cast<uint64_t>(i + 1)]);
      const int64_t E = (n + 255) / 256 + 6;
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = perm[i];
        const double magnitude = std::ldexp(128.0 + static_cast<double>((p / 2) % 128), static_cast<int>(p / 256 - E));
        v[i] = p % 2 ? -magnitude : magnitude;
      }
      return from_vector(v, s.shape, cpu);
    }
  }
  return Tensor();
}

// `base` (CPU, contiguous) as the spec's dtype for a run in `dtype` on `device`, its values first
// rounded through `round_dtype`, laid out as the spec says; a fresh leaf.
Tensor materialise(const InputSpec& s, const Tensor& base, Device device, DType dtype, DType round_dtype,
                   bool reference = false) {
  NoGradGuard no_grad;
  const bool integral = s.values == Values::Indices;
  const DType want = integral ? kInt64 : (s.keep_float64 ? kFloat64 : dtype);
  Tensor values = base;
  if (!integral && !s.keep_float64 && round_dtype != kFloat64) values = base.to(round_dtype);
  Tensor t = Tensor::empty(base.shape(), want, device);
  t.copy_(values);
  switch (s.layout) {
    case Layout::Contiguous: break;
    case Layout::Transposed: t = noncontiguous_copy(t); break;
    case Layout::ChannelsLast:
      DP_CHECK(t.dim() == 4, "op harness: input ", s.name, " is not 4-D and cannot be channels-last");
      if (!reference) t = t.contiguous(MemoryFormat::ChannelsLast);
      break;
    case Layout::Narrowed: {
      DP_CHECK(!integral && t.dim() >= 1, "op harness: input ", s.name, " cannot be narrowed");
      Shape wide = t.shape();
      wide.back() += 3;
      Tensor buffer = full(wide, std::numeric_limits<double>::quiet_NaN(), want, device);
      Tensor view = buffer.narrow(t.dim() - 1, 1, t.shape().back());
      view.copy_(t);
      t = view;
      break;
    }
  }
  t = t.detach();
  if (s.requires_grad && !integral) t.set_requires_grad(true);
  return t;
}

std::vector<Tensor> base_inputs(const OpCase& c) {
  Generator gen(seed_of(c.name));
  uint64_t perm_state = seed_of(c.name) ^ 0x5DEECE66Dull;
  std::vector<Tensor> out;
  for (const InputSpec& s : c.inputs) out.push_back(base_values(s, gen, perm_state));
  return out;
}

const char* device_label(Device d) { return d.is_cpu() ? "cpu" : "cuda"; }

struct RunResult {
  std::vector<std::string> names;
  std::vector<Tensor> values;  // on the CPU, in the run's dtypes; undefined: no gradient
};

// Runs the case on `device` in `dtype` with inputs (and upstream gradient) rounded through
// `round_dtype`; forward, then backward from outputs[0] when differentiable.
RunResult run_once(const OpCase& c, const std::vector<Tensor>& bases, Device device, DType dtype, DType round_dtype,
                   bool reference = false) {
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    inputs.push_back(materialise(c.inputs[i], bases[i], device, dtype, round_dtype, reference));
  std::vector<Tensor> outputs = c.fn(inputs);
  DP_CHECK(!outputs.empty(), "op harness: case ", c.name, " returned no output");
  RunResult r;
  if (c.differentiable) {
    const Tensor& out = outputs[0];
    Generator gen(seed_of(c.name) + 99);
    Tensor upstream = out.numel() == 0 ? Tensor::empty(out.shape(), kFloat64, runtime().cpu())
                                       : rand(out.shape(), gen, kFloat64, runtime().cpu(), -1.0, 1.0);
    if (round_dtype != kFloat64) upstream = upstream.to(round_dtype);
    Tensor g = Tensor::empty(out.shape(), out.dtype(), out.device());
    g.copy_(upstream);
    out.backward(g);
  }
  Device cpu = runtime().cpu();
  for (size_t i = 0; i < outputs.size(); ++i) {
    r.names.push_back(outputs.size() == 1 ? "output" : "output " + std::to_string(i));
    r.values.push_back(outputs[i].detach().to(cpu));
  }
  if (c.differentiable) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].requires_grad()) continue;
      r.names.push_back("gradient of " + c.inputs[i].name);
      Tensor g = inputs[i].grad();
      r.values.push_back(g.defined() ? g.detach().to(cpu) : Tensor());
    }
  }
  return r;
}

std::string index_str(int64_t linear, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = shape[d] ? linear % shape[d] : 0;
    linear = shape[d] ? linear / shape[d] : 0;
  }
  std::ostringstream os;
  os << "[";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << idx[d];
  os << "]";
  return os.str();
}

// Empty when `actual` matches `expected` (NOTE [ Op harness ]), else one line naming `what`.
std::string compare_one(const std::string& what, const Tensor& actual, const Tensor& expected, double tol) {
  std::ostringstream msg;
  if (!actual.defined() || !expected.defined()) {
    if (actual.defined() != expected.defined())
      msg << what << ": " << (actual.defined() ? "computed" : "not computed") << ", the reference's "
          << (expected.defined() ? "computed" : "not computed");
    return msg.str();
  }
  if (actual.shape() != expected.shape()) {
    msg << what << ": shape " << shape_str(actual.shape()) << ", expected " << shape_str(expected.shape());
    return msg.str();
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  const bool exact = !is_floating(expected.dtype());
  if (exact) {
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != e[i] && wrong++ == 0) first = static_cast<int64_t>(i);
    if (wrong)
      msg << what << " " << actual.str() << ": " << wrong << " of " << a.size() << " elements differ; first at "
          << index_str(first, actual.shape()) << ": " << a[first] << ", expected " << e[first];
    return msg.str();
  }
  double diff2 = 0, ref2 = 0;
  int64_t nonfinite = 0, first_nonfinite = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(e[i])) {  // the reference's NaN/Inf must be reproduced as such
      const bool same = std::isnan(e[i]) ? std::isnan(a[i]) : a[i] == e[i];
      if (!same && nonfinite++ == 0) first_nonfinite = static_cast<int64_t>(i);
      continue;
    }
    if (!std::isfinite(a[i])) {
      if (nonfinite++ == 0) first_nonfinite = static_cast<int64_t>(i);
      continue;
    }
    diff2 += (a[i] - e[i]) * (a[i] - e[i]);
    ref2 += e[i] * e[i];
  }
  if (nonfinite) {
    msg << what << " " << actual.str() << ": " << nonfinite << " non-finite mismatches; first at "
        << index_str(first_nonfinite, actual.shape()) << ": " << a[first_nonfinite] << ", expected "
        << e[first_nonfinite];
    return msg.str();
  }
  const double rms = a.empty() ? 0.0 : std::sqrt(ref2 / static_cast<double>(a.size()));
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  int64_t worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(e[i])) continue;
    const double scale = rms > 0 ? std::abs(e[i]) + rms : 1.0;
    const double ratio = std::abs(a[i] - e[i]) / scale;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = static_cast<int64_t>(i);
    }
  }
  const bool norm_bad = rel > tol, element_bad = worst_ratio > 10 * tol;
  if (norm_bad || element_bad) {
    msg << what << " " << actual.str() << ": norm-relative error " << rel << (norm_bad ? " > " : " <= ") << tol;
    if (worst >= 0)
      msg << "; worst element " << index_str(worst, actual.shape()) << " = " << a[worst] << ", expected " << e[worst]
          << " (error " << worst_ratio << " of |expected| + rms " << rms << (element_bad ? ", > " : ", <= ")
          << 10 * tol << ")";
  }
  return msg.str();
}

}  // namespace

InputSpec indices(std::string name, Shape shape, int64_t bound, std::vector<int64_t> fixed) {
  InputSpec s(std::move(name), std::move(shape));
  s.values = Values::Indices;
  s.low = 0;
  s.high = static_cast<double>(bound);
  s.requires_grad = false;
  s.fixed = std::move(fixed);
  return s;
}

double Tolerance::for_dtype(DType dtype) const {
  switch (dtype) {
    case DType::Float32: return f32;
    case DType::Float64: return f64;
    case DType::Float16: return f16;
    case DType::BFloat16: return bf16;
    default: return 0.0;
  }
}

Tolerance Tolerance::scaled(double factor) const {
  Tolerance t = *this;
  t.f32 *= factor;
  t.f64 *= factor;
  t.f16 *= factor;
  t.bf16 *= factor;
  return t;
}

Tolerance Tolerance::gradcheck(double atol, double rtol) const {
  Tolerance t = *this;
  t.gc_atol = atol;
  t.gc_rtol = rtol;
  return t;
}

void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.name << " (kernels";
  for (Kernel k : c.kernels) *os << " " << kernel_name(k);
  *os << ")";
}

Runtime& runtime() {
  // One CPU thread: the inputs are small (below the kernels' parallel grain), the threaded CPU
  // paths have their own tests, and OpenMP barriers on an oversubscribed 2-core CI machine made
  // the whole set several times slower with two.
  static Runtime rt([] {
    RuntimeOptions o;
    o.cpu_threads = 1;
    return o;
  }());
  return rt;
}

std::vector<DType> supported_dtypes(Backend& backend, const OpCase& c) {
  std::vector<DType> out;
  for (DType d : kComparedDtypes) {
    bool all = true;
    for (Kernel k : c.kernels) all = all && backend.supports(k, d);
    if (all) out.push_back(d);
  }
  return out;
}

std::string run_gradcheck(const OpCase& c) {
  const std::vector<Tensor> bases = base_inputs(c);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    inputs.push_back(materialise(c.inputs[i], bases[i], runtime().cpu(), kFloat64, kFloat64));
  const OpFn fn = c.gradcheck_fn ? c.gradcheck_fn : c.fn;
  auto first_output = [fn](const std::vector<Tensor>& v) { return fn(v)[0]; };
  GradcheckOptions o;
  o.eps = c.tol.gc_eps;
  o.atol = c.tol.gc_atol;
  o.rtol = c.tol.gc_rtol;
  std::string msg = gradcheck(first_output, inputs, o);
  return msg.empty() ? msg : c.name + " (gradcheck, float64 on cpu):\n" + msg;
}

std::string run_comparison(const OpCase& c, Device device, DType dtype) {
  const std::vector<Tensor> bases = base_inputs(c);
  const RunResult expected = run_once(c, bases, runtime().cpu(), kFloat64, dtype, /*reference=*/true);
  const RunResult actual = run_once(c, bases, device, dtype, dtype);
  std::string header = c.name + " [" + dtype_name(dtype) + " on " + device_label(device) + " vs float64 on cpu]";
  if (expected.values.size() != actual.values.size())
    return header + ": " + std::to_string(actual.values.size()) + " results, the reference has " +
           std::to_string(expected.values.size());
  std::string msg;
  const double tol = c.tol.for_dtype(dtype);
  for (size_t i = 0; i < expected.values.size(); ++i) {
    const std::string m = compare_one(expected.names[i], actual.values[i], expected.values[i], tol);
    if (!m.empty()) msg += header + " " + m + "\n";
  }
  return msg;
}

Tensor kept_format(const Tensor& in, const Tensor& out) {
  DP_CHECK(in.suggest_memory_format() != MemoryFormat::ChannelsLast ||
               out.suggest_memory_format() == MemoryFormat::ChannelsLast || out.numel() == 0,
           "op harness: the input ", in.str(), " is channels-last but the output ", out.str(), " (strides ",
           shape_str(out.strides()), ") is not");
  return out;
}

}  // namespace dp::testing::harness
