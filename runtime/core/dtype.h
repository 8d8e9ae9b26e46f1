// Element types. Half types are stored as raw 16-bit words; the CPU backend computes on them
// through Eigen::half / Eigen::bfloat16, the CUDA backend through __half / __nv_bfloat16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dp {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, UInt8, Bool };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kBool = DType::Bool;

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::Float64: case DType::Int64: return 8;
    case DType::Float32: case DType::Int32: return 4;
    case DType::Float16: case DType::BFloat16: return 2;
    case DType::UInt8: case DType::Bool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

constexpr bool is_low_precision(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// The dtype arithmetic on `t` values runs in: float32 for float16/bfloat16, else `t` itself
// (kernels' accumulators, normalisation statistics under mixed precision).
constexpr DType compute_dtype(DType t) { return is_low_precision(t) ? DType::Float32 : t; }

// PyTorch's spelling: "float32", "bfloat16", "int64", "bool", ...
const char* dtype_name(DType t);
// Inverse of dtype_name; also accepts "float", "half", "double", "long", "int". Throws on unknown.
DType dtype_from_name(std::string_view name);

}  // namespace dp
