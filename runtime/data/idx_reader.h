// Reader for IDX files (the MNIST / Fashion-MNIST container), gzipped or not.
//
// Layout (all integers big-endian): a 4-byte magic 0x00 0x00 <type> <rank>, then `rank` uint32
// dimensions, then the elements in row-major order. Only unsigned bytes (type 0x08) are
// supported: magic 0x00000803 for images [N, H, W] and 0x00000801 for labels [N].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/shape.h"

namespace dp {

struct IdxArray {
  Shape dims;                 // e.g. [60000, 28, 28]
  std::vector<uint8_t> data;  // numel_of(dims) bytes, row-major
};

// Reads an IDX file of unsigned bytes with `expected_rank` dimensions. gzip is detected from the
// content, so both `x.gz` and an uncompressed copy work. Throws dp::Error naming the file and
// the problem (cannot open, not gzip/IDX, corrupt stream, wrong magic or rank, truncated or
// trailing data); `open_hint` is appended when the file cannot be opened (what to install).
IdxArray read_idx_ubyte(const std::string& path, int expected_rank, std::string_view open_hint = {});

// The same from the file's bytes in memory (gzip detected the same way); `name` stands for the
// file in messages. read_idx_ubyte reads the file and calls this, so the fuzzer
// (tests/fuzz/fuzz_idx.cpp) checks the reader users run without going through the file system.
IdxArray parse_idx_ubyte(std::span<const uint8_t> bytes, int expected_rank, const std::string& name);

}  // namespace dp
