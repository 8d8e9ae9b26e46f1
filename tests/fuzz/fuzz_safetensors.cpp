// Fuzz target: the safetensors reader (runtime/io/safetensors.h), through parse_safetensors (the
// parser read_safetensors runs on a file). Input: the file's bytes. A dp::Error is the expected
// answer to bad input; what it accepts must be consistent: every entry holds exactly dtype size
// x numel bytes, and together they fit in the input.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "runtime/core/error.h"
#include "runtime/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dp::SafetensorsFile st;
  try {
    st = dp::parse_safetensors(std::as_bytes(std::span<const uint8_t>(data, size)), "fuzz.safetensors");
  } catch (const dp::Error&) {
    return 0;
  }
  uint64_t total = 0;
  for (const auto& [name, e] : st.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(dp::safetensors_numel(e.shape)) * dp::safetensors_dtype_size(e.dtype);
    if (bytes != e.data.size() || name == "__metadata__") std::abort();
    total += bytes;
  }
  if (total + 8 > size) std::abort();
  return 0;
}
