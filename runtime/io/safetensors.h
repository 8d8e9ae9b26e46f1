// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//
//   [8 bytes: N, little-endian u64][N bytes: JSON header, space-padded][byte buffer]
//   header = {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"<key>": "<string>", ...}}            (metadata optional)
//
// Offsets are relative to the start of the byte buffer; tensors are row-major, little-endian.
// This layer knows nothing of dp::Tensor: an entry is a dtype string, a shape and raw bytes, so
// checkpoints, test fixtures and the tensor class can all sit on top of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/core/error.h"

namespace dp {

// dtype is one of "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
struct SafetensorsEntry {
  std::string dtype;
  std::vector<int64_t> shape;  // {} is a 0-d (scalar) tensor; a 0 dim makes it empty
  std::vector<std::byte> data; // exactly numel * dtype size bytes, little-endian
};

struct SafetensorsFile {
  // In file order (by data offset) after reading; written in this order.
  std::vector<std::pair<std::string, SafetensorsEntry>> tensors;
  std::map<std::string, std::string> metadata;

  bool contains(const std::string& name) const;
  // Throws dp::Error listing the names present when `name` is missing.
  const SafetensorsEntry& at(const std::string& name) const;
  SafetensorsEntry& at(const std::string& name);
  // Appends; throws on a duplicate or reserved ("__metadata__") name.
  void add(std::string name, SafetensorsEntry entry);
};

// Throws dp::Error, naming the file and the problem, on a missing, truncated or malformed file:
// bad header length, bad JSON, unknown dtype, offsets out of range, overlapping, leaving holes,
// or not matching dtype size x numel.
SafetensorsFile read_safetensors(const std::string& path);

// The same checks on a whole file's bytes in memory; `name` stands for the file in messages.
// read_safetensors runs the same parser on the file (tests/fuzz/fuzz_safetensors.cpp fuzzes it
// through this entry point, without the file system).
SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name);

// Atomic: writes "<path>.tmp.<pid>", fsyncs it, renames it over `path` and fsyncs the
// directory, so a crash leaves either the old file or the complete new one at `path`.
void write_safetensors(const std::string& path, const SafetensorsFile& file);

// Bytes per element of a safetensors dtype; throws dp::Error on an unknown one.
size_t safetensors_dtype_size(const std::string& dtype);

// Product of the dims (1 for a 0-d shape); throws on a negative dim or overflow.
int64_t safetensors_numel(const std::vector<int64_t>& shape);

// ---- Typed helpers --------------------------------------------------------------------------
// The dtype string that matches a C++ element type (F16/BF16 have none: use raw bytes).
static_assert(sizeof(bool) == 1, "BOOL entries are copied as one byte per element");

template <typename T>
constexpr const char* safetensors_dtype_of() {
  if constexpr (std::is_same_v<T, double>) return "F64";
  else if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, int64_t>) return "I64";
  else if constexpr (std::is_same_v<T, int32_t>) return "I32";
  else if constexpr (std::is_same_v<T, int16_t>) return "I16";
  else if constexpr (std::is_same_v<T, int8_t>) return "I8";
  else if constexpr (std::is_same_v<T, uint8_t>) return "U8";
  else if constexpr (std::is_same_v<T, bool>) return "BOOL";
  else static_assert(!sizeof(T), "no safetensors dtype for this element type");
}

template <typename T>
SafetensorsEntry make_safetensors_entry(std::vector<int64_t> shape, std::span<const T> values) {
  SafetensorsEntry e{safetensors_dtype_of<T>(), std::move(shape), {}};
  DP_CHECK(safetensors_numel(e.shape) == static_cast<int64_t>(values.size()),
           "make_safetensors_entry: shape has ", safetensors_numel(e.shape), " elements but ",
           values.size(), " values were given");
  e.data.resize(values.size_bytes());
  if (!values.empty()) std::memcpy(e.data.data(), values.data(), values.size_bytes());
  return e;
}

// Copies the entry's elements out; throws when the dtype is not T's.
template <typename T>
std::vector<T> safetensors_values(const SafetensorsEntry& e) {
  DP_CHECK(e.dtype == safetensors_dtype_of<T>(), "safetensors_values: entry has dtype ", e.dtype,
           ", asked for ", safetensors_dtype_of<T>());
  DP_CHECK(e.data.size() % sizeof(T) == 0, "safetensors_values: ", e.data.size(),
           " bytes is not a whole number of ", e.dtype, " elements");
  std::vector<T> out(e.data.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), e.data.data(), e.data.size());
  return out;
}

}  // namespace dp
