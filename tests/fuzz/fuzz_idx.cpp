// Fuzz target: the IDX reader (runtime/data/idx_reader.h), gzipped or plain, as the images
// (rank 3) and the labels (rank 1) reader. A dp::Error is the expected answer to bad input; the
// reader must never allocate much beyond what the file holds (libFuzzer's malloc limit).
#include <cstdint>
#include <cstdlib>

#include "memory_file.h"
#include "runtime/data/idx_reader.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dp::fuzz::MemoryFile file;
  const std::string& path = file.write(data, size);
  for (int rank : {3, 1}) {
    try {
      const dp::IdxArray a = dp::read_idx_ubyte(path, rank);
      // What it returns is consistent: rank dims, and exactly their product in bytes.
      // (A zero dim makes the others arbitrary: 128-bit, so their product cannot overflow.)
      unsigned __int128 n = 1;
      for (int64_t d : a.dims) n = d == 0 || n == 0 ? 0 : n * static_cast<uint64_t>(d);
      if (static_cast<int>(a.dims.size()) != rank || n != a.data.size()) std::abort();
    } catch (const dp::Error&) {
    }
  }
  return 0;
}
