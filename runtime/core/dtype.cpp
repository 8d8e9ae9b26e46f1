#include "runtime/core/dtype.h"

#include "runtime/core/error.h"

namespace dp {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
  }
  return "?";
}

DType dtype_from_name(std::string_view name) {
  struct Alias { std::string_view name; DType type; };
  static constexpr Alias kAliases[] = {
      {"float32", kFloat32}, {"float", kFloat32},  {"float64", kFloat64}, {"double", kFloat64},
      {"float16", kFloat16}, {"half", kFloat16},   {"bfloat16", kBFloat16}, {"int32", kInt32},
      {"int", kInt32},       {"int64", kInt64},    {"long", kInt64},      {"uint8", kUInt8},
      {"bool", kBool}};
  for (const Alias& a : kAliases)
    if (a.name == name) return a.type;
  throw Error(detail::concat("unknown dtype '", name,
                             "' (known: float32, float64, float16, bfloat16, int32, int64, uint8, bool)"));
}

}  // namespace dp
