#include "runtime/ops/creation.h"

#include <cmath>

#include "runtime/backend/backend.h"

namespace dp {

Tensor empty(const Shape& shape, DType dtype, Device device) { return Tensor::empty(shape, dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  device.backend().fill(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full({}, value, dtype, device); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  DP_CHECK(step != 0 && (end - start) / step >= 0, "arange: empty or infinite range [", start, ", ",
           end, ") with step ", step);
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = Tensor::empty({n}, dtype, device);
  device.backend().arange(t, start, step);
  return t;
}

void uniform_(Tensor& t, Generator& gen, double low, double high) {
  DP_CHECK(t.is_contiguous(), "uniform_: needs a contiguous tensor, got ", t.str());
  t.device().backend().random(t, RandomDist::Uniform, low, high, gen.seed(), gen.reserve(t.numel()), gen.offset_base());
  t.bump_version();
}

void normal_(Tensor& t, Generator& gen, double mean, double std) {
  DP_CHECK(t.is_contiguous(), "normal_: needs a contiguous tensor, got ", t.str());
  t.device().backend().random(t, RandomDist::Normal, mean, std, gen.seed(), gen.reserve(t.numel()), gen.offset_base());
  t.bump_version();
}

Tensor rand(const Shape& shape, Generator& gen, DType dtype, Device device, double low, double high) {
  Tensor t = Tensor::empty(shape, dtype, device);
  uniform_(t, gen, low, high);
  return t;
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device, double mean, double std) {
  Tensor t = Tensor::empty(shape, dtype, device);
  normal_(t, gen, mean, std);
  return t;
}

Tensor from_host(const void* data, const Shape& shape, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (t.nbytes()) device.backend().copy_from_host(t.raw_data(), data, t.nbytes());
  return t;
}

template <typename T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, Device device) {
  DP_CHECK(static_cast<int64_t>(data.size()) == numel_of(shape), "from_vector: ", data.size(),
           " values for shape ", shape_str(shape));
  constexpr DType dtype = std::is_same_v<T, float>     ? kFloat32
                          : std::is_same_v<T, double>  ? kFloat64
                          : std::is_same_v<T, int32_t> ? kInt32
                          : std::is_same_v<T, int64_t> ? kInt64
                                                       : kUInt8;
  return from_host(data.data(), shape, dtype, device);
}

template Tensor from_vector<float>(const std::vector<float>&, const Shape&, Device);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&, Device);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&, Device);

}  // namespace dp
