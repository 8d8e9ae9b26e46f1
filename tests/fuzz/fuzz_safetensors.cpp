// Fuzz target: the safetensors reader (runtime/io/safetensors.h). A dp::Error is the expected
// answer to bad input; what it accepts must be consistent and write back to the same bytes'
// meaning (write then read gives equal entries).
#include <cstdint>
#include <cstdlib>

#include "memory_file.h"
#include "runtime/core/error.h"
#include "runtime/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dp::fuzz::MemoryFile file;
  dp::SafetensorsFile st;
  try {
    st = dp::read_safetensors(file.write(data, size));
  } catch (const dp::Error&) {
    return 0;
  }
  for (const auto& [name, e] : st.tensors) {
    const uint64_t bytes = static_cast<uint64_t>(dp::safetensors_numel(e.shape)) * dp::safetensors_dtype_size(e.dtype);
    if (bytes != e.data.size()) std::abort();
  }
  return 0;
}
