// Tensor creation, always directly on the target device.
#pragma once

#include <vector>

#include "runtime/tensor/generator.h"
#include "runtime/tensor/tensor.h"

namespace dp {

Tensor empty(const Shape& shape, DType dtype, Device device);
Tensor zeros(const Shape& shape, DType dtype, Device device);
Tensor ones(const Shape& shape, DType dtype, Device device);
Tensor full(const Shape& shape, double value, DType dtype, Device device);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// [start, end) with step, as torch.arange.
Tensor arange(double start, double end, double step, DType dtype, Device device);
// Uniform on [low, high), and normal(mean, std), from `gen` (advances it).
Tensor rand(const Shape& shape, Generator& gen, DType dtype, Device device, double low = 0.0, double high = 1.0);
Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device, double mean = 0.0, double std = 1.0);
// In-place fills from a generator (used by nn initialisers).
void uniform_(Tensor& t, Generator& gen, double low, double high);
void normal_(Tensor& t, Generator& gen, double mean, double std);
// Copies host data (row-major) into a new tensor on `device`.
template <typename T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, Device device);
Tensor from_host(const void* data, const Shape& shape, DType dtype, Device device);
// A 0-d tensor.
Tensor scalar_tensor(double value, DType dtype, Device device);

}  // namespace dp
