#include "runtime/data/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

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

// The bytes of an IDX file held in memory, inflated on the fly when they are gzip (RFC 1952).
// It behaves as zlib's gzread did when the reader opened files with gzopen: gzip is recognised
// by its magic 1F 8B, concatenated gzip members are read as one stream, and bytes after the last
// member that are not another gzip header are ignored (as gzip(1) does).
class IdxBytes {
 public:
  IdxBytes(std::span<const uint8_t> bytes, const std::string& name)
      : name_(name), in_(bytes), gzip_(bytes.size() >= 2 && bytes[0] == 0x1F && bytes[1] == 0x8B) {
    if (!gzip_) return;
    // 16 + MAX_WBITS: a gzip wrapper (header and CRC-32 / length trailer), 32 KiB window.
    DP_CHECK(inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK, "'", name_, "': zlib cannot start inflating: out of memory");
    inflating_ = true;
  }
  IdxBytes(const IdxBytes&) = delete;
  IdxBytes& operator=(const IdxBytes&) = delete;
  ~IdxBytes() {
    if (inflating_) inflateEnd(&z_);
  }

  // Reads up to n bytes and returns how many arrived (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    if (!gzip_) {
      const size_t got = std::min(n, in_.size());
      if (got > 0) std::memcpy(dst, in_.data(), got);
      in_ = in_.subspan(got);
      return got;
    }
    size_t total = 0;
    while (total < n && !ended_) {
      // zlib counts in unsigned int: feed input and take output in pieces below 4 GiB.
      z_.next_in = const_cast<Bytef*>(in_.data());
      z_.avail_in = static_cast<uInt>(std::min<size_t>(in_.size(), UINT_MAX));
      z_.next_out = static_cast<Bytef*>(dst) + total;
      z_.avail_out = static_cast<uInt>(std::min<size_t>(n - total, UINT_MAX));
      const uInt in_before = z_.avail_in, out_before = z_.avail_out;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      in_ = in_.subspan(in_before - z_.avail_in);
      total += out_before - z_.avail_out;
      if (rc == Z_STREAM_END) {
        // Another member follows (`cat a.gz b.gz`), or the data ends here.
        if (in_.size() >= 2 && in_[0] == 0x1F && in_[1] == 0x8B) {
          inflateReset(&z_);
        } else {
          ended_ = true;
        }
      } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT) {
        throw Error(detail::concat("'", name_, "': corrupt gzip stream (", z_.msg ? z_.msg : "compressed data error",
                                   "); re-download the file"));
      } else if (rc == Z_MEM_ERROR) {
        throw Error(detail::concat("'", name_, "': zlib ran out of memory inflating the file"));
      } else if (rc == Z_BUF_ERROR || (rc == Z_OK && in_.empty() && z_.avail_out > 0)) {
        // All input used with room left for output (Z_BUF_ERROR: no progress at all): the data
        // stops inside a member.
        truncated_ = ended_ = true;
      } else {
        DP_CHECK(rc == Z_OK, "'", name_, "': zlib error ", rc, z_.msg ? detail::concat(": ", z_.msg) : "");
      }
    }
    return total;
  }

  bool is_gzip() const { return gzip_; }

  // What went wrong after a short read; empty when the data simply ended.
  std::string stream_error() const { return truncated_ ? "the gzip stream ends early (file truncated?)" : ""; }

 private:
  std::string name_;
  std::span<const uint8_t> in_;  // what is not consumed yet
  bool gzip_;
  z_stream z_{};
  bool inflating_ = false;
  bool ended_ = false;      // no more output: the last member ended, or the input ran out in one
  bool truncated_ = false;  // the input ran out inside a gzip member
};

std::string with_zlib_detail(const std::string& message, const IdxBytes& stream) {
  const std::string detail = stream.stream_error();
  return detail.empty() ? message : message + "; " + detail;
}

// The whole file, as it is on disk (compressed or not).
std::vector<uint8_t> read_file(const std::string& path, std::string_view open_hint) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) {
    throw Error(detail::concat("cannot open '", path, "': ", std::strerror(errno), open_hint.empty() ? "" : " — ",
                               open_hint));
  }
  // Sized from fstat plus one spare byte, so a regular file is read without reallocating (the
  // spare byte sees its end); anything else (a pipe) grows as it comes.
  struct stat st{};
  const bool regular = ::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode);
  std::vector<uint8_t> bytes(regular ? static_cast<size_t>(st.st_size) + 1 : size_t{1} << 16);
  size_t size = 0;
  for (;;) {
    if (size == bytes.size()) bytes.resize(2 * size);
    const ssize_t got = ::read(file.fd, bytes.data() + size, bytes.size() - size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(detail::concat("'", path, "': read error: ", std::strerror(errno)));
    if (got == 0) break;
    size += static_cast<size_t>(got);
  }
  bytes.resize(size);
  return bytes;
}

}  // namespace

IdxArray read_idx_ubyte(const std::string& path, int expected_rank, std::string_view open_hint) {
  DP_CHECK(expected_rank >= 1 && expected_rank <= 255, "read_idx_ubyte: expected_rank must be in [1, 255], got ",
           expected_rank);
  return parse_idx_ubyte(read_file(path, open_hint), expected_rank, path);
}

IdxArray parse_idx_ubyte(std::span<const uint8_t> bytes, int expected_rank, const std::string& name) {
  DP_CHECK(expected_rank >= 1 && expected_rank <= 255, "parse_idx_ubyte: expected_rank must be in [1, 255], got ",
           expected_rank);
  IdxBytes stream(bytes, name);
  const uint32_t expected_magic = (uint32_t{kUnsignedByteType} << 8) | static_cast<uint32_t>(expected_rank);

  uint8_t magic_bytes[4] = {};
  const size_t magic_got = stream.read(magic_bytes, 4);
  DP_CHECK(magic_got == 4, with_zlib_detail(detail::concat("'", name, "': too short for an IDX header (",
                                                           magic_got, " bytes)"), stream));
  const uint32_t magic = load_be32(magic_bytes);
  const bool looks_like_idx = magic_bytes[0] == 0 && magic_bytes[1] == 0;
  DP_CHECK(stream.is_gzip() || looks_like_idx, "'", name,
           "': neither a gzip file (magic 1F 8B) nor an uncompressed IDX file (first 4 bytes ", hex32(magic),
           ", expected ", hex32(expected_magic), ")");
  DP_CHECK(looks_like_idx && magic_bytes[2] == kUnsignedByteType, "'", name, "': bad IDX magic ", hex32(magic),
           " (expected ", hex32(expected_magic), ": unsigned bytes, rank ", expected_rank, ")");
  const int rank = magic_bytes[3];
  DP_CHECK(rank == expected_rank, "'", name, "': IDX rank ", rank, " (magic ", hex32(magic), ") but rank ",
           expected_rank, " (magic ", hex32(expected_magic), ") was expected; are the images and labels files swapped?");

  std::vector<uint8_t> dim_bytes(4 * static_cast<size_t>(rank));
  const size_t dims_got = stream.read(dim_bytes.data(), dim_bytes.size());
  DP_CHECK(dims_got == dim_bytes.size(),
           with_zlib_detail(detail::concat("'", name, "': truncated IDX header: expected ", dim_bytes.size(),
                                           " bytes of dimensions, got ", dims_got), stream));
  IdxArray array;
  // The product saturates at kMaxPayloadBytes + 1 (any zero dimension makes it 0): a capped
  // product times a 32-bit dimension can exceed 64 bits, and a wrapped product once let
  // dimensions [65536, 131072, 2^31] pass as an empty payload (found by tests/fuzz/fuzz_idx).
  uint64_t payload_bytes = 1;
  bool has_zero_dim = false;
  for (int d = 0; d < rank; ++d) {
    const uint32_t size = load_be32(&dim_bytes[4 * static_cast<size_t>(d)]);
    array.dims.push_back(static_cast<int64_t>(size));
    has_zero_dim = has_zero_dim || size == 0;
    uint64_t product = 0;
    payload_bytes = __builtin_mul_overflow(payload_bytes, uint64_t{size}, &product)
                        ? kMaxPayloadBytes + 1
                        : std::min(product, kMaxPayloadBytes + 1);
  }
  if (has_zero_dim) payload_bytes = 0;
  DP_CHECK(payload_bytes <= kMaxPayloadBytes, "'", name, "': IDX header claims dimensions ", shape_str(array.dims),
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
           with_zlib_detail(detail::concat("'", name, "': truncated payload: expected ", payload_bytes, " bytes (dimensions ",
                                           shape_str(array.dims), "), got ", payload_got), stream));
  uint8_t extra = 0;
  DP_CHECK(stream.read(&extra, 1) == 0, "'", name, "': data continues after the ", payload_bytes,
           "-byte payload of dimensions ", shape_str(array.dims), "; the header does not match the content");
  // The whole payload arrived but the gzip trailer (CRC-32 and length) did not: the file is cut
  // short and its data unchecked (gzread let this pass).
  DP_CHECK(stream.stream_error().empty(), "'", name, "': ", stream.stream_error());
  return array;
}

}  // namespace dp
