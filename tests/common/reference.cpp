#include "common/reference.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "runtime/ops/creation.h"

namespace dp::testing {

namespace {
// tests/common/reference.cpp → tests/fixtures (the build passes absolute source paths).
std::string fixture_dir() {
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / "fixtures").string();
}
}  // namespace

Fixture::Fixture(const std::string& name)
    : path_(fixture_dir() + "/" + name + ".safetensors"), file_(read_safetensors(path_)) {}

Tensor Fixture::tensor(const std::string& name, Device device) const {
  const SafetensorsEntry& e = file_.at(name);
  DType dtype;
  if (e.dtype == "F64") dtype = kFloat64;
  else if (e.dtype == "F32") dtype = kFloat32;
  else if (e.dtype == "I64") dtype = kInt64;
  else if (e.dtype == "U8") dtype = kUInt8;
  else throw Error(detail::concat(path_, ": entry '", name, "' has dtype ", e.dtype, ", not F64, F32, I64 or U8"));
  return from_host(e.data.data(), Shape(e.shape.begin(), e.shape.end()), dtype, device);
}

const std::string& Fixture::option(const std::string& key) const {
  auto it = file_.metadata.find(key);
  DP_CHECK(it != file_.metadata.end(), path_, ": no metadata key '", key, "'");
  return it->second;
}

std::pair<int64_t, int64_t> Fixture::option_pair(const std::string& key) const {
  const std::string& text = option(key);
  long long first = 0, second = 0;
  int consumed = 0;
  const bool ok = std::sscanf(text.c_str(), "%lld,%lld%n", &first, &second, &consumed) == 2 &&
                  consumed == static_cast<int>(text.size());
  DP_CHECK(ok, path_, ": option ", key, " = \"", text, "\" is not a pair of integers like \"2,1\"");
  return {first, second};
}

std::string compare_tensors(const std::string& what, const Tensor& actual, const Tensor& expected, double tol) {
  std::ostringstream msg;
  if (actual.shape() != expected.shape()) {
    msg << what << ": shape " << shape_str(actual.shape()) << ", expected " << shape_str(expected.shape());
    return msg.str();
  }
  const std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  size_t worst = 0;
  double worst_err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]);
    if (err > worst_err || std::isnan(err)) {
      worst_err = std::isnan(err) ? INFINITY : err;
      worst = i;
    }
  }
  if (worst_err > tol)
    msg << what << ": element " << worst << " is " << a[worst] << ", expected " << e[worst] << " (|error| "
        << worst_err << " > " << tol << ")";
  return msg.str();
}

namespace {

// Output followed by the gradient of every input that requires grad.
std::vector<Tensor> forward_backward(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                     const std::vector<Tensor>& inputs, DType dtype) {
  std::vector<Tensor> cast;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach();
    if (c.dtype() == kFloat64) c = c.to(dtype).detach();
    if (t.requires_grad()) c.set_requires_grad(true);
    cast.push_back(c);
  }
  Tensor out = fn(cast);
  Generator gen(99);
  out.backward(rand(out.shape(), gen, kFloat64, out.device(), -1.0, 1.0).to(dtype));
  std::vector<Tensor> results{out};
  for (const Tensor& t : cast)
    if (t.requires_grad()) results.push_back(t.grad());
  return results;
}

}  // namespace

std::string compare_float32_with_float64(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                         const std::vector<Tensor>& inputs, double tol) {
  const std::vector<Tensor> f64 = forward_backward(fn, inputs, kFloat64);
  const std::vector<Tensor> f32 = forward_backward(fn, inputs, kFloat32);
  std::string msg;
  for (size_t i = 0; i < f64.size(); ++i) {
    const std::string what = i == 0 ? "float32 output" : "float32 gradient " + std::to_string(i - 1);
    const std::string m = compare_tensors(what, f32[i], f64[i], tol);
    if (!m.empty()) msg += m + "\n";
  }
  return msg;
}

}  // namespace dp::testing
