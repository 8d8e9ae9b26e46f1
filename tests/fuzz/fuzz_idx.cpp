// Fuzz target: the IDX reader (runtime/data/idx_reader.h), gzipped or plain, as the images
// (rank 3) and the labels (rank 1) reader, through parse_idx_ubyte (the parser read_idx_ubyte
// runs on a file's bytes). Input: the file's bytes. A dp::Error is the expected answer to bad
// input; the reader must never allocate much beyond what the input holds (libFuzzer's
// -malloc_limit_mb and -rss_limit_mb make that a finding).
#include <cstdint>
#include <cstdlib>
#include <span>

#include "runtime/core/error.h"
#include "runtime/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  for (int rank : {3, 1}) {
    try {
      const dp::IdxArray a = dp::parse_idx_ubyte(bytes, rank, "fuzz.idx");
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
