#include "runtime/text/text_shards.h"

#include "runtime/io/posix_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp::text {

static_assert(std::endian::native == std::endian::little,
              "text shards are little-endian files mapped as they are; this host is big-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using dp::detail::concat;

using io::errno_text;
using Fd = io::FileDescriptor;

std::string join(const std::string& dir, std::string_view file) { return (fs::path(dir) / file).string(); }

const std::string kRemake = "run dptrain prepare-text again to remake it";

// ---- Writing -----------------------------------------------------------------------------------

// A new file (never an existing one) written in pieces, fsynced and closed by finish().
class NewFile {
 public:
  explicit NewFile(std::string path)
      : path_(std::move(path)), fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) {
    DP_CHECK(fd_.get() >= 0, "text shard: cannot create '", path_, "': ", errno_text());
  }
  void write(const void* data, size_t n) {
    io::write_full(fd_.get(), data, n, path_, "text shard");
    bytes_ += n;
  }
  uint64_t finish() {
    DP_CHECK(::fsync(fd_.get()) == 0, "text shard: fsync of '", path_, "' failed: ", errno_text());
    DP_CHECK(fd_.close() == 0, "text shard: closing '", path_, "' failed: ", errno_text());
    return bytes_;
  }

 private:
  std::string path_;
  Fd fd_;
  uint64_t bytes_ = 0;
};

// Filesystems that cannot fsync a directory say EINVAL/ENOTSUP, which is as durable as they get.
void fsync_directory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DP_CHECK(fd.get() >= 0, "text shard: cannot open directory '", dir, "' to fsync it: ", errno_text());
  DP_CHECK(::fsync(fd.get()) == 0 || errno == EINVAL || errno == ENOTSUP, "text shard: fsync of directory '", dir,
           "' failed: ", errno_text());
}

// Values converted to little-endian `T` and written in 1 MiB pieces.
template <typename T, typename Source>
void write_converted(NewFile& file, size_t n, Source&& value_at) {
  constexpr size_t kChunk = (size_t{1} << 20) / sizeof(T);
  std::vector<T> buffer(std::min(n, kChunk));
  for (size_t begin = 0; begin < n; begin += kChunk) {
    const size_t count = std::min(kChunk, n - begin);
    for (size_t k = 0; k < count; ++k) buffer[k] = static_cast<T>(value_at(begin + k));
    file.write(buffer.data(), count * sizeof(T));
  }
}

void check_sequences(const Sequences& s, const Vocabulary& vocab, int max_seq_length) {
  const size_t n = s.segment_b_starts.size();
  DP_CHECK(n > 0, "text shard: no sequences to write (the corpus made none)");
  DP_CHECK(s.offsets.size() == n + 1, "text shard: sequences have ", s.offsets.size(), " offsets for ", n,
           " sequences (expected ", n + 1, ")");
  DP_CHECK(s.offsets.front() == 0 && static_cast<uint64_t>(s.offsets.back()) == s.ids.size(),
           "text shard: sequence offsets run from ", s.offsets.front(), " to ", s.offsets.back(), ", expected 0 to ",
           s.ids.size(), " (the number of ids)");
  for (size_t i = 0; i < n; ++i) {
    const int64_t length = s.offsets[i + 1] - s.offsets[i];
    DP_CHECK(length >= 1 && length <= max_seq_length, "text shard: sequence ", i, " has length ", length,
             ", outside [1, max_seq_length = ", max_seq_length, "]");
    DP_CHECK(s.segment_b_starts[i] >= 1 && s.segment_b_starts[i] <= length, "text shard: sequence ", i,
             " (length ", length, ") has segment B starting at ", s.segment_b_starts[i]);
  }
  const auto vocab_size = static_cast<int64_t>(vocab.size());
  for (size_t k = 0; k < s.ids.size(); ++k) {
    DP_CHECK(s.ids[k] >= 0 && s.ids[k] < vocab_size, "text shard: token ", k, " has id ", s.ids[k],
             ", outside vocabulary ", vocab.source(), " of ", vocab_size, " tokens");
  }
}

json source_json(const SourceFile& f) {
  return {{"path", f.path},           {"bytes", f.bytes},         {"fnv1a64", hex_digest(f.fnv1a64)},
          {"documents", f.documents}, {"sentences", f.sentences}, {"tokens", f.tokens}};
}

// Writes sequences [first, last) of `s` into the existing empty directory `dir` and fsyncs it.
void write_shard_files(const std::string& dir, const Sequences& s, size_t first, size_t last, const Vocabulary& vocab,
                       const TextShardProvenance& provenance, size_t shard_index, size_t shard_count) {
  const TokenDtype dtype = token_dtype_for_vocab(vocab.size());
  const auto id_begin = static_cast<size_t>(s.offsets[first]);
  const size_t id_count = static_cast<size_t>(s.offsets[last]) - id_begin;
  const size_t n = last - first;
  json files = json::object();

  NewFile tokens(join(dir, kTextShardTokensFile));
  if (dtype == TokenDtype::kUint16) {
    write_converted<uint16_t>(tokens, id_count, [&](size_t k) { return s.ids[id_begin + k]; });
  } else {
    write_converted<int32_t>(tokens, id_count, [&](size_t k) { return s.ids[id_begin + k]; });
  }
  files[std::string(kTextShardTokensFile)] = {{"bytes", tokens.finish()}};

  NewFile offsets(join(dir, kTextShardOffsetsFile));
  write_converted<int64_t>(offsets, n + 1, [&](size_t k) { return s.offsets[first + k] - s.offsets[first]; });
  files[std::string(kTextShardOffsetsFile)] = {{"bytes", offsets.finish()}};

  NewFile segments(join(dir, kTextShardSegmentsFile));
  write_converted<int32_t>(segments, n, [&](size_t k) { return s.segment_b_starts[first + k]; });
  files[std::string(kTextShardSegmentsFile)] = {{"bytes", segments.finish()}};

  json sources = json::array();
  for (const SourceFile& f : provenance.sources) sources.push_back(source_json(f));
  const SequenceOptions& o = provenance.sequence_options;
  const json meta = {{"format", std::string(kTextShardFormat)},
                     {"format_version", kTextShardFormatVersion},
                     {"vocab",
                      {{"fingerprint", hex_digest(vocab.fingerprint())},
                       {"size", vocab.size()},
                       {"source", vocab.source()}}},
                     {"max_seq_length", o.max_seq_length},
                     {"sequences", n},
                     {"tokens", id_count},
                     {"token_dtype", std::string(token_dtype_name(dtype))},
                     {"corpus_format", std::string(corpus_format_name(provenance.corpus_format))},
                     {"seed", o.seed},
                     {"short_seq_prob", o.short_seq_prob},
                     {"dupe_factor", o.dupe_factor},
                     {"shard_index", shard_index},
                     {"shard_count", shard_count},
                     {"sources", sources},
                     {"files", files}};
  // A source path that is not UTF-8 (Linux allows any bytes) is stored with U+FFFD in its place.
  const std::string text = meta.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
  NewFile meta_file(join(dir, kTextShardMetaFile));
  meta_file.write(text.data(), text.size());
  meta_file.finish();
  fsync_directory(dir);
}

// Runs `fill(tmp)` on a fresh temporary directory beside `dir`, then renames it to `dir`; on any
// error the temporary is removed and `dir` is left as it was (absent).
template <typename Fill>
void write_atomically(const std::string& dir, Fill&& fill) {
  DP_CHECK(!dir.empty(), "text shard: empty output directory name");
  fs::path target = fs::path(dir).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" is "out"
  DP_CHECK(!target.filename().empty() && target.filename() != "." && target.filename() != "..",
           "text shard: '", dir, "' does not name a new directory");
  std::error_code ec;
  DP_CHECK(!fs::exists(fs::symlink_status(target, ec)), "text shard: '", dir,
           "' exists already; it is kept as it is: remove it, or choose another output directory, to prepare "
           "the text again");
  fs::path parent = target.parent_path();
  if (parent.empty()) parent = ".";
  fs::create_directories(parent, ec);
  DP_CHECK(!ec, "text shard: cannot create directory '", parent.string(), "': ", ec.message());
  std::string name = target.filename().string();
  const std::string tmp = (parent / (name + ".tmp." + std::to_string(::getpid()))).string();
  fs::remove_all(tmp, ec);  // one this process left behind
  try {
    DP_CHECK(fs::create_directory(tmp, ec) && !ec, "text shard: cannot create '", tmp, "': ",
             ec ? ec.message() : "it exists");
    fill(tmp);
    fsync_directory(tmp);
    // rename(2) would replace an empty directory that appeared meanwhile; it must not.
    DP_CHECK(!fs::exists(fs::symlink_status(target, ec)), "text shard: '", dir,
             "' appeared while it was being written (another prepare-text?); it is kept as it is");
    DP_CHECK(::rename(tmp.c_str(), target.c_str()) == 0, "text shard: cannot rename '", tmp, "' to '", dir,
             "': ", errno_text());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  fsync_directory(parent.string());
}

// ---- Reading -----------------------------------------------------------------------------------

std::string read_text_file(const std::string& path, const std::string& dir) {
  std::ifstream in(path, std::ios::binary);
  DP_CHECK(in.good(), "text shard ", dir, ": cannot open '", path, "': ", errno_text(),
           " (not a shard directory, or an incomplete one: ", kRemake, ")");
  std::ostringstream text;
  text << in.rdbuf();
  DP_CHECK(!in.bad(), "text shard ", dir, ": reading '", path, "' failed: ", errno_text());
  return text.str();
}

uint64_t parse_hex64(const std::string& text, const std::string& where) {
  DP_CHECK(text.size() == 16 && text.find_first_not_of("0123456789abcdef") == std::string::npos, where,
           " is not 16 lowercase hex digits: '", text, "'");
  return std::stoull(text, nullptr, 16);
}

TextShardMeta parse_meta(const std::string& dir) {
  const std::string path = join(dir, kTextShardMetaFile);
  const std::string text = read_text_file(path, dir);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(concat("text shard ", dir, ": '", path, "' is not valid JSON (", e.what(), "); ", kRemake));
  }
  TextShardMeta m;
  try {
    DP_CHECK(j.is_object() && j.contains("format") && j["format"] == kTextShardFormat, "text shard ", dir, ": '", path,
             "' is not a dptrain text shard's meta.json (no \"format\": \"", kTextShardFormat, "\"); ", kRemake);
    m.format_version = j.at("format_version").get<int>();
    DP_CHECK(m.format_version == kTextShardFormatVersion, "text shard ", dir, ": '", path, "' has format_version ",
             m.format_version, ", but this dptrain reads text shards of version ", kTextShardFormatVersion, ": ",
             kRemake, " with this dptrain");
    const json& vocab = j.at("vocab");
    m.vocab_fingerprint = parse_hex64(vocab.at("fingerprint").get<std::string>(), "'" + path + "': vocab.fingerprint");
    m.vocab_size = vocab.at("size").get<uint64_t>();
    m.vocab_source = vocab.at("source").get<std::string>();
    m.max_seq_length = j.at("max_seq_length").get<int>();
    m.num_sequences = j.at("sequences").get<uint64_t>();
    m.num_tokens = j.at("tokens").get<uint64_t>();
    const std::string dtype = j.at("token_dtype").get<std::string>();
    DP_CHECK(dtype == "uint16" || dtype == "int32", "text shard ", dir, ": '", path, "' has token_dtype '", dtype,
             "'; expected uint16 or int32; ", kRemake);
    m.token_dtype = dtype == "uint16" ? TokenDtype::kUint16 : TokenDtype::kInt32;
    m.corpus_format = j.at("corpus_format").get<std::string>();
    m.seed = j.at("seed").get<uint64_t>();
    m.short_seq_prob = j.at("short_seq_prob").get<double>();
    m.dupe_factor = j.at("dupe_factor").get<int>();
    m.shard_index = j.at("shard_index").get<uint64_t>();
    m.shard_count = j.at("shard_count").get<uint64_t>();
    for (const json& s : j.at("sources")) {
      SourceFile f;
      f.path = s.at("path").get<std::string>();
      f.bytes = s.at("bytes").get<uint64_t>();
      f.fnv1a64 = parse_hex64(s.at("fnv1a64").get<std::string>(), "'" + path + "': sources[].fnv1a64");
      f.documents = s.at("documents").get<uint64_t>();
      f.sentences = s.at("sentences").get<uint64_t>();
      f.tokens = s.at("tokens").get<uint64_t>();
      m.sources.push_back(std::move(f));
    }
  } catch (const json::exception& e) {
    throw Error(concat("text shard ", dir, ": '", path, "' lacks a field or has one of the wrong type (", e.what(),
                       "); ", kRemake));
  } catch (const std::logic_error& e) {  // std::stoull
    throw Error(concat("text shard ", dir, ": '", path, "': ", e.what(), "; ", kRemake));
  }
  DP_CHECK(m.max_seq_length >= 1, "text shard ", dir, ": '", path, "' has max_seq_length ", m.max_seq_length, "; ",
           kRemake);
  DP_CHECK(m.token_dtype == token_dtype_for_vocab(m.vocab_size), "text shard ", dir, ": '", path, "' stores ids as ",
           token_dtype_name(m.token_dtype), " for a vocabulary of ", m.vocab_size, " tokens; ", kRemake);
  return m;
}

// The size the file must have, or an error naming it.
void check_size(const detail::MappedFile& file, const std::string& path, uint64_t expected, const std::string& what,
                const std::string& dir) {
  DP_CHECK(file.size() == expected, "text shard ", dir, ": '", path, "' has ", file.size(), " bytes, but meta.json's ",
           what, " need ", expected, (file.size() < expected ? " (the file is truncated)" : " (the file has extra bytes)"),
           "; ", kRemake);
}

}  // namespace

// ---- Dtypes ------------------------------------------------------------------------------------

TokenDtype token_dtype_for_vocab(size_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::kUint16 : TokenDtype::kInt32;
}

std::string_view token_dtype_name(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? "uint16" : "int32"; }

size_t token_dtype_bytes(TokenDtype dtype) { return dtype == TokenDtype::kUint16 ? 2 : 4; }

// ---- Writing -----------------------------------------------------------------------------------

void write_text_shard(const std::string& dir, const Sequences& sequences, const Vocabulary& vocab,
                      const TextShardProvenance& provenance) {
  check_sequences(sequences, vocab, provenance.sequence_options.max_seq_length);
  write_atomically(dir, [&](const std::string& tmp) {
    write_shard_files(tmp, sequences, 0, sequences.size(), vocab, provenance, 0, 1);
  });
}

std::vector<std::string> write_text_shards(const std::string& dir, const Sequences& sequences, const Vocabulary& vocab,
                                           const TextShardProvenance& provenance, size_t sequences_per_shard) {
  DP_CHECK(sequences_per_shard >= 1, "text shard: sequences_per_shard must be at least 1");
  check_sequences(sequences, vocab, provenance.sequence_options.max_seq_length);
  const size_t n = sequences.size();
  const size_t count = (n + sequences_per_shard - 1) / sequences_per_shard;
  const int width = std::max<int>(5, static_cast<int>(std::to_string(count - 1).size()));
  std::vector<std::string> names;
  for (size_t k = 0; k < count; ++k) {
    std::string digits = std::to_string(k);
    names.push_back("shard_" + std::string(static_cast<size_t>(width) - digits.size(), '0') + digits);
  }
  write_atomically(dir, [&](const std::string& tmp) {
    for (size_t k = 0; k < count; ++k) {
      const std::string shard_dir = join(tmp, names[k]);
      std::error_code ec;
      DP_CHECK(fs::create_directory(shard_dir, ec) && !ec, "text shard: cannot create '", shard_dir, "': ",
               ec ? ec.message() : "it exists");
      const size_t first = k * sequences_per_shard;
      write_shard_files(shard_dir, sequences, first, std::min(n, first + sequences_per_shard), vocab, provenance, k,
                        count);
    }
  });
  std::vector<std::string> dirs;
  for (const std::string& name : names) dirs.push_back(join(dir, name));
  return dirs;
}

// ---- MappedFile --------------------------------------------------------------------------------

namespace detail {

MappedFile MappedFile::map(const std::string& path, std::string_view what) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  DP_CHECK(fd.get() >= 0, "cannot open ", what, " '", path, "': ", errno_text());
  struct stat st{};
  DP_CHECK(::fstat(fd.get(), &st) == 0, "cannot stat ", what, " '", path, "': ", errno_text());
  DP_CHECK(S_ISREG(st.st_mode), what, " '", path, "' is not a regular file");
  MappedFile file;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ == 0) return file;
  void* addr = ::mmap(nullptr, file.size_, PROT_READ, MAP_SHARED, fd.get(), 0);
  DP_CHECK(addr != MAP_FAILED, "cannot map ", what, " '", path, "' (", file.size_, " bytes): ", errno_text());
  file.addr_ = addr;
  return file;  // the mapping outlives the descriptor
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : addr_(std::exchange(other.addr_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (addr_ != nullptr) ::munmap(addr_, size_);
    addr_ = std::exchange(other.addr_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
}

}  // namespace detail

// ---- TokenIds ----------------------------------------------------------------------------------

void TokenIds::copy_to(std::span<int32_t> out) const {
  DP_CHECK(out.size() >= size_, "TokenIds::copy_to: room for ", out.size(), " ids, the sequence has ", size_);
  if (dtype_ == TokenDtype::kInt32) {
    if (size_ > 0) std::memcpy(out.data(), data_, size_ * sizeof(int32_t));
    return;
  }
  const auto* p = static_cast<const uint16_t*>(data_);
  for (size_t i = 0; i < size_; ++i) out[i] = p[i];
}

std::vector<int32_t> TokenIds::to_vector() const {
  std::vector<int32_t> out(size_);
  copy_to(out);
  return out;
}

std::span<const uint16_t> TokenIds::as_uint16() const {
  DP_CHECK(dtype_ == TokenDtype::kUint16, "TokenIds::as_uint16: this shard stores ids as int32 (a vocabulary of more "
           "than 65536 tokens); use as_int32() or operator[]");
  return {static_cast<const uint16_t*>(data_), size_};
}

std::span<const int32_t> TokenIds::as_int32() const {
  DP_CHECK(dtype_ == TokenDtype::kInt32, "TokenIds::as_int32: this shard stores ids as uint16 (a vocabulary of at "
           "most 65536 tokens); use as_uint16() or operator[]");
  return {static_cast<const int32_t*>(data_), size_};
}

// ---- TextShard ---------------------------------------------------------------------------------

TextShard TextShard::open(const std::string& dir, const Vocabulary& expected) {
  TextShard shard;
  shard.dir_ = dir;
  shard.meta_ = parse_meta(dir);
  const TextShardMeta& m = shard.meta_;
  DP_CHECK(m.vocab_fingerprint == expected.fingerprint() && m.vocab_size == expected.size(), "shard ", dir,
           " was made with another vocabulary (fingerprint ", hex_digest(m.vocab_fingerprint), ", ", m.vocab_size,
           " tokens, vocab.txt of ", m.vocab_source, "); this run's vocab ", expected.source(), " has fingerprint ",
           hex_digest(expected.fingerprint()), " (", expected.size(),
           " tokens): set data.vocab to the vocabulary the shards were made with, or make the shards again with ",
           "dptrain prepare-text --vocab ", expected.source());

  const std::string tokens_path = join(dir, kTextShardTokensFile);
  const std::string offsets_path = join(dir, kTextShardOffsetsFile);
  const std::string segments_path = join(dir, kTextShardSegmentsFile);
  auto map = [&](const std::string& path, std::string_view role) {
    try {
      return detail::MappedFile::map(path, role);
    } catch (const Error& e) {
      throw Error(concat("text shard ", dir, ": ", e.what(), "; ", kRemake));
    }
  };
  shard.tokens_ = map(tokens_path, "token file");
  shard.offsets_ = map(offsets_path, "offsets file");
  shard.segments_ = map(segments_path, "segments file");
  const uint64_t n = m.num_sequences;
  // Sizes first (a product that overflows is a corrupt count: it cannot match any file).
  const uint64_t max_count = uint64_t{1} << 60;
  DP_CHECK(n < max_count && m.num_tokens < max_count, "text shard ", dir, ": meta.json claims ", n,
           " sequences and ", m.num_tokens, " tokens; ", kRemake);
  check_size(shard.tokens_, tokens_path, m.num_tokens * token_dtype_bytes(m.token_dtype),
             concat(m.num_tokens, " tokens of ", token_dtype_name(m.token_dtype)), dir);
  check_size(shard.offsets_, offsets_path, (n + 1) * sizeof(int64_t), concat(n, " sequences (n + 1 int64 offsets)"),
             dir);
  check_size(shard.segments_, segments_path, n * sizeof(int32_t), concat(n, " sequences (n int32 segment starts)"),
             dir);

  // Offsets and segment starts, and the lengths the batching code asks for.
  const auto* offsets = reinterpret_cast<const int64_t*>(shard.offsets_.data());
  const auto* segments = reinterpret_cast<const int32_t*>(shard.segments_.data());
  DP_CHECK(offsets[0] == 0, "text shard ", dir, ": '", offsets_path, "' starts at ", offsets[0], ", not 0; ", kRemake);
  shard.lengths_.resize(static_cast<size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const int64_t length = offsets[i + 1] - offsets[i];
    DP_CHECK(length >= 1 && length <= m.max_seq_length && offsets[i + 1] <= static_cast<int64_t>(m.num_tokens),
             "text shard ", dir, ": '", offsets_path, "' is inconsistent: sequence ", i, " spans tokens [", offsets[i],
             ", ", offsets[i + 1], ") of ", m.num_tokens, " (lengths must be in [1, max_seq_length = ",
             m.max_seq_length, "]); ", kRemake);
    DP_CHECK(segments[i] >= 1 && segments[i] <= length, "text shard ", dir, ": '", segments_path, "': sequence ", i,
             " of length ", length, " has segment B starting at ", segments[i], "; ", kRemake);
    shard.lengths_[i] = static_cast<int32_t>(length);
  }
  DP_CHECK(offsets[n] == static_cast<int64_t>(m.num_tokens), "text shard ", dir, ": '", offsets_path,
           "' is inconsistent: the last sequence ends at token ", offsets[n], ", but meta.json says ", m.num_tokens,
           " tokens; ", kRemake);

  // Every id below the vocabulary size: a max over the file (vectorises), then, only when it
  // fails, a search for the first offender to name it.
  const size_t tokens = static_cast<size_t>(m.num_tokens);
  int64_t max_id = -1, min_id = 0;
  if (m.token_dtype == TokenDtype::kUint16) {
    const auto* p = reinterpret_cast<const uint16_t*>(shard.tokens_.data());
    uint16_t mx = 0;
    for (size_t k = 0; k < tokens; ++k) mx = std::max(mx, p[k]);
    max_id = tokens > 0 ? mx : -1;
  } else {
    const auto* p = reinterpret_cast<const int32_t*>(shard.tokens_.data());
    int32_t mx = INT32_MIN, mn = INT32_MAX;
    for (size_t k = 0; k < tokens; ++k) {
      mx = std::max(mx, p[k]);
      mn = std::min(mn, p[k]);
    }
    max_id = tokens > 0 ? mx : -1;
    min_id = tokens > 0 ? mn : 0;
  }
  if (max_id >= static_cast<int64_t>(m.vocab_size) || min_id < 0) {
    const TokenIds all(shard.tokens_.data(), tokens, m.token_dtype);
    size_t k = 0;
    while (all[k] >= 0 && all[k] < static_cast<int64_t>(m.vocab_size)) ++k;
    const size_t i = static_cast<size_t>(std::upper_bound(offsets, offsets + n + 1, static_cast<int64_t>(k)) - offsets) - 1;
    throw Error(concat("text shard ", dir, ": '", tokens_path, "' holds id ", all[k], " (token ", k, ", sequence ", i,
                       ") outside the vocabulary of ", m.vocab_size, " tokens; the file is damaged: ", kRemake));
  }
  return shard;
}

size_t TextShard::length(size_t i) const {
  DP_CHECK(i < size(), "text shard ", dir_, ": sequence ", i, " asked for, the shard has ", size());
  return static_cast<size_t>(lengths_[i]);
}

TokenIds TextShard::tokens(size_t i) const {
  DP_CHECK(i < size(), "text shard ", dir_, ": sequence ", i, " asked for, the shard has ", size());
  const auto* offsets = reinterpret_cast<const int64_t*>(offsets_.data());
  const size_t bytes = token_dtype_bytes(meta_.token_dtype);
  return TokenIds(tokens_.data() + static_cast<size_t>(offsets[i]) * bytes, static_cast<size_t>(lengths_[i]),
                  meta_.token_dtype);
}

int32_t TextShard::segment_b_start(size_t i) const {
  DP_CHECK(i < size(), "text shard ", dir_, ": sequence ", i, " asked for, the shard has ", size());
  return reinterpret_cast<const int32_t*>(segments_.data())[i];
}

// ---- TextDataset -------------------------------------------------------------------------------

TextDataset TextDataset::open(const std::string& path, const Vocabulary& expected) {
  TextDataset dataset;
  dataset.path_ = path;
  std::error_code ec;
  DP_CHECK(fs::is_directory(path, ec), "text data '", path, "' is not a directory (",
           ec ? ec.message() : "missing or a file",
           "): name the folder dptrain prepare-text wrote, or run it to make one");
  std::vector<std::string> dirs;
  if (fs::exists(join(path, kTextShardMetaFile), ec)) {
    dirs.push_back(path);
  } else {
    for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      std::error_code type_ec;
      if (name.starts_with("shard_") && name.find(".tmp.") == std::string::npos && entry.is_directory(type_ec)) {
        dirs.push_back(entry.path().string());
      }
    }
    DP_CHECK(!ec, "text data '", path, "': cannot list it: ", ec.message());
    std::sort(dirs.begin(), dirs.end());
  }
  DP_CHECK(!dirs.empty(), "text data '", path,
           "' holds no shard (no meta.json and no shard_* directories): run dptrain prepare-text to make them");
  for (const std::string& dir : dirs) {
    TextShard shard = TextShard::open(dir, expected);
    if (!dataset.shards_.empty()) {
      const TextShard& first = dataset.shards_.front();
      DP_CHECK(shard.max_seq_length() == first.max_seq_length(), "text data '", path, "': shard ", dir,
               " has max_seq_length ", shard.max_seq_length(), " but shard ", first.dir(), " has ",
               first.max_seq_length(), "; keep shards of one max_seq_length in a folder");
    }
    dataset.starts_.push_back(dataset.lengths_.size());
    dataset.lengths_.insert(dataset.lengths_.end(), shard.lengths().begin(), shard.lengths().end());
    dataset.num_tokens_ += shard.num_tokens();
    dataset.shards_.push_back(std::move(shard));
  }
  return dataset;
}

std::pair<size_t, size_t> TextDataset::locate(size_t i) const {
  DP_CHECK(i < size(), "text data '", path_, "': sequence ", i, " asked for, the data has ", size());
  const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) - starts_.begin()) - 1;
  return {k, i - starts_[k]};
}

size_t TextDataset::length(size_t i) const {
  DP_CHECK(i < size(), "text data '", path_, "': sequence ", i, " asked for, the data has ", size());
  return static_cast<size_t>(lengths_[i]);
}

TokenIds TextDataset::tokens(size_t i) const {
  const auto [k, j] = locate(i);
  return shards_[k].tokens(j);
}

int32_t TextDataset::segment_b_start(size_t i) const {
  const auto [k, j] = locate(i);
  return shards_[k].segment_b_start(j);
}

}  // namespace dp::text
