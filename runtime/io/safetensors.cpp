#include "runtime/io/safetensors.h"
#include "runtime/io/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

namespace dp {

// The byte buffer is little-endian; we copy it verbatim into memory.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr const char* kMetadataKey = "__metadata__";
// Same bound as the reference implementation: a larger header is garbage, not a real file,
// and must not make us allocate gigabytes before we find out.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A real header nests three deep (the header, an entry, its shape list). nlohmann::json copies
// values recursively (ordered_json does when an object grows) and prints them recursively (our
// error messages), so a header of brackets nested a million deep overflowed the stack; anything
// deeper than this is refused while it is parsed (found by tests/fuzz/fuzz_safetensors).
constexpr int kMaxHeaderDepth = 64;

struct DtypeInfo {
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                 {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

std::string known_dtypes() {
  std::string s;
  for (const auto& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

using io::errno_text;
using Fd = io::FileDescriptor;

// Entry bytes implied by dtype and shape, with overflow checked; `what` prefixes errors.
uint64_t expected_bytes(const std::string& dtype, const std::vector<int64_t>& shape, const std::string& what) {
  uint64_t numel = 0;
  try {
    numel = static_cast<uint64_t>(safetensors_numel(shape));
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  uint64_t bytes = 0;
  DP_CHECK(!__builtin_mul_overflow(numel, safetensors_dtype_size(dtype), &bytes), what,
           ": byte size overflows 64 bits");
  return bytes;
}

// ---- Header parsing -------------------------------------------------------------------------

struct ParsedEntry {
  uint64_t begin, end;
  std::string name;
  SafetensorsEntry entry;
};

ParsedEntry parse_entry(const std::string& path, const std::string& name, const nlohmann::ordered_json& j) {
  const std::string where = "read_safetensors: '" + path + "': tensor '" + name + "'";
  DP_CHECK(j.is_object(), where, ": header entry must be a JSON object, got ", j.dump());
  DP_CHECK(j.contains("dtype") && j["dtype"].is_string(), where, ": missing string field \"dtype\"");
  DP_CHECK(j.contains("shape") && j["shape"].is_array(), where, ": missing list field \"shape\"");
  DP_CHECK(j.contains("data_offsets") && j["data_offsets"].is_array(), where,
           ": missing list field \"data_offsets\"");

  ParsedEntry p{0, 0, name, {}};
  p.entry.dtype = j["dtype"].get<std::string>();
  bool known = std::any_of(std::begin(kDtypes), std::end(kDtypes),
                           [&](const DtypeInfo& d) { return p.entry.dtype == d.name; });
  DP_CHECK(known, where, ": unknown dtype \"", p.entry.dtype, "\" (supported: ", known_dtypes(), ")");

  for (const auto& d : j["shape"]) {
    // nlohmann stores non-negative integers as unsigned; anything else is not a valid dim.
    DP_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), where,
             ": shape must be a list of non-negative integers, got ", j["shape"].dump());
    p.entry.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
  }

  const auto& off = j["data_offsets"];
  DP_CHECK(off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where,
           ": data_offsets must be two non-negative integers [begin, end], got ", off.dump());
  p.begin = off[0].get<uint64_t>();
  p.end = off[1].get<uint64_t>();
  DP_CHECK(p.begin <= p.end, where, ": data_offsets ", off.dump(), " end before they begin");

  uint64_t want = expected_bytes(p.entry.dtype, p.entry.shape, where);
  DP_CHECK(p.end - p.begin == want, where, ": data_offsets ", off.dump(), " span ", p.end - p.begin,
           " bytes but dtype ", p.entry.dtype, " x shape ", j["shape"].dump(), " needs ", want);
  return p;
}

void parse_metadata(const std::string& path, const nlohmann::ordered_json& j, std::map<std::string, std::string>& out) {
  DP_CHECK(j.is_object(), "read_safetensors: '", path, "': \"", kMetadataKey,
           "\" must be an object of strings, got ", j.dump());
  for (const auto& [k, v] : j.items()) {
    DP_CHECK(v.is_string(), "read_safetensors: '", path, "': metadata value for \"", k,
             "\" must be a string, got ", v.dump());
    out[k] = v.get<std::string>();
  }
}

}  // namespace

// ---- Small API ------------------------------------------------------------------------------

size_t safetensors_dtype_size(const std::string& dtype) {
  for (const auto& d : kDtypes)
    if (dtype == d.name) return d.size;
  throw Error("safetensors: unknown dtype \"" + dtype + "\" (supported: " + known_dtypes() + ")");
}

int64_t safetensors_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    DP_CHECK(d >= 0, "safetensors: negative dimension ", d, " in shape");
    DP_CHECK(!__builtin_mul_overflow(n, d, &n), "safetensors: element count of shape overflows int64");
  }
  return n;
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
}

SafetensorsEntry& SafetensorsFile::at(const std::string& name) {
  for (auto& [n, e] : tensors)
    if (n == name) return e;
  std::string names;
  for (const auto& t : tensors) names += (names.empty() ? "" : ", ") + t.first;
  throw Error("safetensors: no tensor named '" + name + "' (present: " + (names.empty() ? "none" : names) + ")");
}

const SafetensorsEntry& SafetensorsFile::at(const std::string& name) const {
  return const_cast<SafetensorsFile*>(this)->at(name);
}

void SafetensorsFile::add(std::string name, SafetensorsEntry entry) {
  DP_CHECK(name != kMetadataKey, "safetensors: '", kMetadataKey, "' is reserved and cannot name a tensor");
  DP_CHECK(!contains(name), "safetensors: duplicate tensor name '", name, "'");
  tensors.emplace_back(std::move(name), std::move(entry));
}

// ---- Reading --------------------------------------------------------------------------------

namespace {

// Where the reader takes a file's bytes from: copies up to n bytes at `offset` into dst and
// returns how many there were (fewer only past the end).
using ReadAt = std::function<size_t(uint64_t offset, void* dst, size_t n)>;

// Everything the reader checks, on a file of `file_size` bytes that read_at gives; `path` names
// it in messages.
SafetensorsFile parse_file(uint64_t file_size, const ReadAt& read_at, const std::string& path) {
  unsigned char len_bytes[8];
  DP_CHECK(file_size >= 8 && read_at(0, len_bytes, 8) == 8, "read_safetensors: '", path,
           "' is truncated: ", file_size, " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  DP_CHECK(header_len <= file_size - 8, "read_safetensors: '", path, "': header length ", header_len,
           " is larger than the ", file_size - 8,
           " bytes that follow it (truncated file, or not a safetensors file)");
  DP_CHECK(header_len <= kMaxHeaderBytes, "read_safetensors: '", path, "': header length ", header_len,
           " exceeds the ", kMaxHeaderBytes, "-byte limit (not a safetensors file?)");

  std::string header_text(header_len, '\0');
  DP_CHECK(read_at(8, header_text.data(), header_len) == header_len, "read_safetensors: '", path,
           "' shrank while being read");
  // ordered_json keeps the header's key order, which breaks ties between empty tensors that
  // share an offset, so a round trip preserves the written order.
  nlohmann::ordered_json header;
  const auto depth_check = [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json&) {
    const bool opens = event == nlohmann::ordered_json::parse_event_t::object_start ||
                       event == nlohmann::ordered_json::parse_event_t::array_start;
    DP_CHECK(!opens || depth < kMaxHeaderDepth, "read_safetensors: '", path, "': header nests lists or objects more than ",
             kMaxHeaderDepth, " deep (not a safetensors file?)");
    return true;
  };
  try {
    header = nlohmann::ordered_json::parse(header_text, depth_check);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error("read_safetensors: '" + path + "': header is not valid JSON: " + e.what());
  }
  DP_CHECK(header.is_object(), "read_safetensors: '", path, "': header must be a JSON object, got a ",
           header.type_name());

  SafetensorsFile out;
  std::vector<ParsedEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey)
      parse_metadata(path, value, out.metadata);
    else
      entries.push_back(parse_entry(path, name, value));
  }

  // The buffer must be tiled exactly: no overlaps (two tensors sharing bytes), no holes, no
  // trailing bytes. Offsets past the end mean the file was cut short.
  const uint64_t data_start = 8 + header_len;
  const uint64_t buffer_size = file_size - data_start;
  std::stable_sort(entries.begin(), entries.end(),
            [](const ParsedEntry& a, const ParsedEntry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t covered = 0;
  const std::string* prev = nullptr;
  for (const auto& e : entries) {
    DP_CHECK(e.end <= buffer_size, "read_safetensors: '", path, "': tensor '", e.name, "' data_offsets [", e.begin,
             ", ", e.end, "] run past the end of the ", buffer_size, "-byte data buffer (file truncated?)");
    DP_CHECK(e.begin >= covered, "read_safetensors: '", path, "': tensor '", e.name, "' data_offsets [", e.begin,
             ", ", e.end, "] overlap tensor '", prev ? *prev : "", "' (which ends at ", covered, ")");
    DP_CHECK(e.begin == covered, "read_safetensors: '", path, "': data buffer has a hole: bytes [", covered, ", ",
             e.begin, ") belong to no tensor (before '", e.name, "')");
    covered = e.end;
    prev = &e.name;
  }
  DP_CHECK(covered == buffer_size, "read_safetensors: '", path, "': data buffer is ", buffer_size,
           " bytes but the tensors cover only ", covered, " (trailing bytes, or a bad header)");

  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    e.entry.data.resize(e.end - e.begin);
    DP_CHECK(read_at(data_start + e.begin, e.entry.data.data(), e.entry.data.size()) == e.entry.data.size(),
             "read_safetensors: '", path, "' shrank while being read");
    out.tensors.emplace_back(std::move(e.name), std::move(e.entry));
  }
  return out;
}

}  // namespace

SafetensorsFile read_safetensors(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  DP_CHECK(fd.get() >= 0, "read_safetensors: cannot open '", path, "': ", errno_text());
  struct stat st{};
  DP_CHECK(::fstat(fd.get(), &st) == 0, "read_safetensors: cannot stat '", path, "': ", errno_text());
  DP_CHECK(S_ISREG(st.st_mode), "read_safetensors: '", path, "' is not a regular file");
  // Read piece by piece (header, then each tensor) rather than whole: a checkpoint is not held
  // twice in memory.
  return parse_file(static_cast<uint64_t>(st.st_size),
                    [&](uint64_t offset, void* dst, size_t n) { return io::pread_full(fd.get(), dst, n, offset, path, "read_safetensors"); },
                    path);
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name) {
  return parse_file(
      bytes.size(),
      [&](uint64_t offset, void* dst, size_t n) -> size_t {
        if (offset >= bytes.size()) return 0;
        const size_t got = std::min<uint64_t>(n, bytes.size() - offset);
        if (got > 0) std::memcpy(dst, bytes.data() + offset, got);
        return got;
      },
      name);
}

// ---- Writing --------------------------------------------------------------------------------

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  // Validate everything before touching the disk: a bad entry must not clobber a good file.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) {
    auto& meta = header[kMetadataKey] = nlohmann::ordered_json::object();
    for (const auto& [k, v] : file.metadata) meta[k] = v;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, e] : file.tensors) {
    const std::string where = "write_safetensors: '" + path + "': tensor '" + name + "'";
    DP_CHECK(name != kMetadataKey, where, ": the name is reserved for metadata");
    DP_CHECK(seen.insert(name).second, where, ": duplicate name");
    const std::string& dtype = e.dtype;  // not `e` in the lambda: clang < 16 cannot capture structured bindings
    DP_CHECK(std::any_of(std::begin(kDtypes), std::end(kDtypes), [&](const DtypeInfo& d) { return dtype == d.name; }),
             where, ": unknown dtype \"", e.dtype, "\" (supported: ", known_dtypes(), ")");
    uint64_t want = expected_bytes(e.dtype, e.shape, where);
    DP_CHECK(e.data.size() == want, where, ": has ", e.data.size(), " bytes but dtype ", e.dtype, " x shape needs ",
             want);
    header[name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + want}}};
    offset += want;
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error("write_safetensors: '" + path + "': a tensor name or metadata string is not valid UTF-8: " + e.what());
  }
  // Pad so the data buffer starts 8-byte aligned (allows zero-copy mmap of F64/I64 tensors).
  header_text.append((8 - header_text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t{header_text.size()} >> (8 * i));

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  DP_CHECK(fd.get() >= 0, "write_safetensors: cannot create '", tmp, "' (for '", path, "'): ", errno_text());
  try {
    io::write_full(fd.get(), len_bytes, 8, tmp, "write_safetensors");
    io::write_full(fd.get(), header_text.data(), header_text.size(), tmp, "write_safetensors");
    for (const auto& [name, e] : file.tensors) io::write_full(fd.get(), e.data.data(), e.data.size(), tmp, "write_safetensors");
    // Data must be on disk before the rename makes it visible, or a crash could expose a
    // renamed but empty file.
    DP_CHECK(::fsync(fd.get()) == 0, "write_safetensors: fsync of '", tmp, "' failed: ", errno_text());
    DP_CHECK(fd.close() == 0, "write_safetensors: closing '", tmp, "' failed: ", errno_text());
    DP_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "write_safetensors: cannot rename '", tmp, "' to '", path,
             "': ", errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }

  // Persist the rename itself. Filesystems that cannot fsync a directory say EINVAL; that is
  // as durable as they get, so it is not an error.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DP_CHECK(dfd.get() >= 0, "write_safetensors: wrote '", path, "' but cannot open its directory to fsync it: ",
           errno_text());
  DP_CHECK(::fsync(dfd.get()) == 0 || errno == EINVAL || errno == ENOTSUP,
           "write_safetensors: wrote '", path, "' but fsync of directory '", dir, "' failed: ", errno_text());
}

}  // namespace dp
