#include "runtime/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <memory>

#include "runtime/core/error.h"

namespace dp {
namespace {

constexpr uint8_t kUnsignedByteType = 0x08;
// A header claiming more than this is corrupt rather than a real data set (Fashion-MNIST's
// training images are 47 MB); refusing it avoids a giant allocation before the read fails.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 34;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// One open IDX file; zlib reads plain files transparently, so this serves both forms.
class IdxStream {
 public:
  IdxStream(const std::string& path, std::string_view open_hint) : path_(path) {
    errno = 0;
    file_.reset(gzopen(path.c_str(), "rb"));
    if (!file_) {
      const char* reason = errno != 0 ? std::strerror(errno) : "out of memory in zlib";
      throw Error(detail::concat("cannot open '", path, "': ", reason,
                                 open_hint.empty() ? "" : " — ", open_hint));
    }
    gzbuffer(file_.get(), 1 << 18);  // fewer read() calls than zlib's 8 KiB default
  }

  // Reads up to n bytes and returns how many arrived (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t total = 0;
    while (total < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - total, INT_MAX / 2));
      const int got = gzread(file_.get(), static_cast<char*>(dst) + total, chunk);
      if (got < 0) throw Error(detail::concat("'", path_, "': ", stream_error()));
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    return total;
  }

  bool is_gzip() const { return gzdirect(file_.get()) == 0; }

  // What zlib reports after a short or failed read; empty when the data simply ended.
  std::string stream_error() const {
    int code = Z_OK;
    const char* message = gzerror(file_.get(), &code);
    switch (code) {
      case Z_OK: return {};
      case Z_BUF_ERROR: return "the gzip stream ends early (file truncated?)";
      case Z_DATA_ERROR: return detail::concat("corrupt gzip stream (", message, "); re-download the file");
      case Z_ERRNO: return detail::concat("read error: ", std::strerror(errno));
      default: return detail::concat("zlib error ", code, ": ", message);
    }
  }

 private:
  struct GzClose {
    void operator()(gzFile_s* f) const { gzclose(f); }
  };
  std::string path_;
  std::unique_ptr<gzFile_s, GzClose> file_;
};

std::string with_zlib_detail(const std::string& message, const IdxStream& stream) {
  const std::string detail = stream.stream_error();
  return detail.empty() ? message : message + "; " + detail;
}

}  // namespace

IdxArray read_idx_ubyte(const std::string& path, int expected_rank, std::string_view open_hint) {
  DP_CHECK(expected_rank >= 1 && expected_rank <= 255, "read_idx_ubyte: expected_rank must be in [1, 255], got ",
           expected_rank);
  IdxStream stream(path, open_hint);
  const uint32_t expected_magic = (uint32_t{kUnsignedByteType} << 8) | static_cast<uint32_t>(expected_rank);

  uint8_t magic_bytes[4] = {};
  const size_t magic_got = stream.read(magic_bytes, 4);
  DP_CHECK(magic_got == 4, with_zlib_detail(detail::concat("'", path, "': too short for an IDX header (",
                                                           magic_got, " bytes)"), stream));
  const uint32_t magic = load_be32(magic_bytes);
  const bool looks_like_idx = magic_bytes[0] == 0 && magic_bytes[1] == 0;
  DP_CHECK(stream.is_gzip() || looks_like_idx, "'", path,
           "': neither a gzip file (magic 1F 8B) nor an uncompressed IDX file (first 4 bytes ", hex32(magic),
           ", expected ", hex32(expected_magic), ")");
  DP_CHECK(looks_like_idx && magic_bytes[2] == kUnsignedByteType, "'", path, "': bad IDX magic ", hex32(magic),
           " (expected ", hex32(expected_magic), ": unsigned bytes, rank ", expected_rank, ")");
  const int rank = magic_bytes[3];
  DP_CHECK(rank == expected_rank, "'", path, "': IDX rank ", rank, " (magic ", hex32(magic), ") but rank ",
           expected_rank, " (magic ", hex32(expected_magic), ") was expected; are the images and labels files swapped?");

  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(rank));
  const size_t dims_got = stream.read(dim_bytes.data(), dim_bytes.size());
  DP_CHECK(dims_got == dim_bytes.size(),
           with_zlib_detail(detail::concat("'", path, "': truncated IDX header: expected ", dim_bytes.size(),
                                           " bytes of dimensions, got ", dims_got), stream));
  IdxArray array;
  uint64_t payload_bytes = 1;
  for (int d = 0; d < rank; ++d) {
    const uint32_t size = load_be32(&dim_bytes[4 * static_cast<size_t>(d)]);
    array.dims.push_back(static_cast<int64_t>(size));
    payload_bytes = size == 0 ? 0 : std::min(payload_bytes * size, kMaxPayloadBytes + 1);
  }
  DP_CHECK(payload_bytes <= kMaxPayloadBytes, "'", path, "': IDX header claims dimensions ", shape_str(array.dims),
           ", more than ", kMaxPayloadBytes, " bytes; the header is corrupt");

  // Read in chunks, growing the buffer only as data arrives: a corrupt header claiming gigabytes
  // must fail as "truncated", not allocate what it claims first (found by tests/fuzz/fuzz_idx).
  // The chunk doubles with what has arrived (1 MiB, 1, 2, 4, ... MiB), so a real file takes a
  // few reads and a bogus one allocates at most about twice its real size.
  constexpr uint64_t kFirstChunkBytes = uint64_t{1} << 20;
  size_t payload_got = 0;
  while (payload_got < payload_bytes) {
    const size_t chunk = static_cast<size_t>(
        std::min<uint64_t>(payload_bytes - payload_got, std::max<uint64_t>(kFirstChunkBytes, payload_got)));
    array.data.resize(payload_got + chunk);
    const size_t got = stream.read(array.data.data() + payload_got, chunk);
    payload_got += got;
    if (got < chunk) break;
  }
  DP_CHECK(payload_got == payload_bytes,
           with_zlib_detail(detail::concat("'", path, "': truncated payload: expected ", payload_bytes, " bytes (dimensions ",
                                           shape_str(array.dims), "), got ", payload_got), stream));
  uint8_t extra = 0;
  DP_CHECK(stream.read(&extra, 1) == 0, "'", path, "': data continues after the ", payload_bytes,
           "-byte payload of dimensions ", shape_str(array.dims), "; the header does not match the content");
  return array;
}

}  // namespace dp
