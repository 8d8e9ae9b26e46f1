#include "runtime/io/tensor_file.h"

#include <set>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"

namespace dp {

namespace {

constexpr std::pair<DType, const char*> kDtypeNames[] = {
    {kFloat32, "F32"}, {kFloat64, "F64"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},
    {kInt32, "I32"},   {kInt64, "I64"},   {kUInt8, "U8"},    {kBool, "BOOL"},
};

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& [d, name] : kDtypeNames)
    if (d == dtype) return name;
  throw Error("safetensors: no dtype name for this tensor dtype");
}

SafetensorsEntry to_safetensors_entry(const Tensor& tensor) {
  DP_CHECK(tensor.defined(), "to_safetensors_entry: undefined tensor");
  const Tensor src = tensor.detach().contiguous();
  SafetensorsEntry entry;
  entry.dtype = safetensors_dtype_name(src.dtype());
  entry.shape.assign(src.shape().begin(), src.shape().end());
  entry.data.resize(src.nbytes());
  if (!entry.data.empty()) src.device().backend().copy_to_host(entry.data.data(), src.raw_data(), src.nbytes());
  return entry;
}

Tensor from_safetensors_entry(const SafetensorsEntry& entry, Device device, const std::string& what) {
  const DType* dtype = nullptr;
  for (const auto& [d, name] : kDtypeNames)
    if (entry.dtype == name) dtype = &d;
  DP_CHECK(dtype != nullptr, what, ": dtype ", entry.dtype, " has no dptrain tensor (F32, F64, F16, BF16, I32, I64, ",
           "U8, BOOL)");
  Tensor out = Tensor::empty(Shape(entry.shape.begin(), entry.shape.end()), *dtype, device);
  DP_CHECK(out.nbytes() == entry.data.size(), what, ": ", entry.data.size(), " bytes for ", out.str());
  if (!entry.data.empty()) device.backend().copy_from_host(out.raw_data(), entry.data.data(), entry.data.size());
  return out;
}

void save_tensors(const std::string& path, const NamedTensorList& tensors,
                  const std::map<std::string, std::string>& metadata) {
  SafetensorsFile file;
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    DP_CHECK(names.insert(name).second, path, ": tensor '", name, "' is given twice");
    file.add(name, to_safetensors_entry(t));
  }
  file.metadata = metadata;
  write_safetensors(path, file);
}

NamedTensorList load_tensors(const std::string& path, Device device, std::map<std::string, std::string>* metadata) {
  SafetensorsFile file = read_safetensors(path);
  NamedTensorList out;
  out.reserve(file.tensors.size());
  for (const auto& [name, entry] : file.tensors)
    out.emplace_back(name, from_safetensors_entry(entry, device, path + ": '" + name + "'"));
  if (metadata) *metadata = std::move(file.metadata);
  return out;
}

}  // namespace dp
