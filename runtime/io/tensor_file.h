// dp::Tensor to and from safetensors (runtime/io/safetensors.h): named tensors of any dtype
// dptrain has, on any device, as one file. What model weights with PyTorch's names, optimiser
// state (NOTE [ Optimiser state ]) and checkpoints are written as, and how PyTorch / Hugging Face
// weights are read.
//
// dtypes map one to one: Float32 F32, Float64 F64, Float16 F16, BFloat16 BF16, Int32 I32, Int64
// I64, UInt8 U8, Bool BOOL. Reading a dtype dptrain has no tensor for (I8, I16) is an error naming
// the file and the entry, never a silent conversion.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/io/safetensors.h"
#include "runtime/tensor/tensor.h"

namespace dp {

using NamedTensorList = std::vector<std::pair<std::string, Tensor>>;

// The safetensors dtype of `dtype` ("F32", ...).
const char* safetensors_dtype_name(DType dtype);

// The tensor's values (copied to the host, made contiguous) as an entry.
SafetensorsEntry to_safetensors_entry(const Tensor& tensor);
// A new tensor on `device` holding the entry; `what` names it in errors ("file.safetensors: 'w'").
Tensor from_safetensors_entry(const SafetensorsEntry& entry, Device device, const std::string& what);

// Writes `tensors` in order, with `metadata` (string pairs), atomically (write_safetensors). A
// duplicated name is a dp::Error naming it.
void save_tensors(const std::string& path, const NamedTensorList& tensors,
                  const std::map<std::string, std::string>& metadata = {});

// Every tensor of the file, in file order, on `device`; `metadata`, when given, receives the
// file's metadata. Errors name the file (read_safetensors) and the entry.
NamedTensorList load_tensors(const std::string& path, Device device,
                             std::map<std::string, std::string>* metadata = nullptr);

}  // namespace dp
