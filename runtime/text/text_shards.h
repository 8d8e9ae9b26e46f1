// Tokenized pretraining sequences on disk: the shard directories `dptrain prepare-text` writes
// and training maps read-only.
//
// A shard directory holds
//   meta.json     format ("dptrain text shard") and format_version; the vocabulary (fingerprint,
//                 size, the vocab.txt it came from); max_seq_length; numbers of sequences and
//                 tokens; token_dtype; how the sequences were made (corpus format, seed,
//                 short_seq_prob, dupe_factor); the source files (path, bytes, FNV-1a 64 digest,
//                 documents, sentences, tokens); the shard's index and the run's shard count; the
//                 byte size of each .bin file.
//   tokens.bin    every sequence's token ids back to back, little-endian uint16 when the
//                 vocabulary has at most 65536 tokens, else little-endian int32 (token_dtype says
//                 which).
//   offsets.bin   little-endian int64 [n + 1]: sequence i is tokens [offsets[i], offsets[i+1]).
//   segments.bin  little-endian int32 [n]: the index inside sequence i where segment B starts
//                 (token type 1 from there on, the final [SEP] included); the sequence's length
//                 when it has no B.
// A shard is written under "<dir>.tmp.<pid>", every file and the directory fsynced, then renamed
// to <dir> (and <dir>'s parent fsynced): a reader sees a whole shard or none. An existing <dir> is
// never replaced or changed: writing to it is an error. A crash can leave "<dir>.tmp.<pid>" behind;
// readers ignore such names and the next write by the same process id removes it.
//
// Opening checks, before any training step: meta.json's format and version; the vocabulary's
// fingerprint against this run's; each .bin file's size against meta.json; offsets (start at 0,
// never decrease, every length in [1, max_seq_length], last == the token count); segment B starts
// within their sequences; and every token id below the vocabulary size (one pass over tokens.bin
// at open, so a damaged shard fails at once with the sequence named, not mid-run; it reads the
// file once, which also brings it into the page cache). Hosts must be little-endian (the files
// are mapped as they are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/corpus.h"
#include "runtime/text/wordpiece.h"

namespace dp::text {

inline constexpr int kTextShardFormatVersion = 1;
inline constexpr std::string_view kTextShardFormat = "dptrain text shard";
inline constexpr std::string_view kTextShardMetaFile = "meta.json";
inline constexpr std::string_view kTextShardTokensFile = "tokens.bin";
inline constexpr std::string_view kTextShardOffsetsFile = "offsets.bin";
inline constexpr std::string_view kTextShardSegmentsFile = "segments.bin";

enum class TokenDtype { kUint16, kInt32 };
// uint16 when every id of a vocabulary of `vocab_size` tokens fits (<= 65536 tokens), else int32.
TokenDtype token_dtype_for_vocab(size_t vocab_size);
std::string_view token_dtype_name(TokenDtype dtype);  // "uint16" / "int32"
size_t token_dtype_bytes(TokenDtype dtype);

// How the sequences were made, recorded in meta.json.
struct TextShardProvenance {
  CorpusFormat corpus_format = CorpusFormat::kPlain;
  SequenceOptions sequence_options;  // max_seq_length, seed, short_seq_prob, dupe_factor
  std::vector<SourceFile> sources;   // TokenizedCorpus::files
};

// meta.json as read back.
struct TextShardMeta {
  int format_version = 0;
  uint64_t vocab_fingerprint = 0;
  uint64_t vocab_size = 0;
  std::string vocab_source;
  int max_seq_length = 0;
  uint64_t num_sequences = 0;
  uint64_t num_tokens = 0;
  TokenDtype token_dtype = TokenDtype::kUint16;
  std::string corpus_format;
  uint64_t seed = 0;
  double short_seq_prob = 0;
  int dupe_factor = 0;
  uint64_t shard_index = 0;
  uint64_t shard_count = 1;
  std::vector<SourceFile> sources;
};

// Writes `sequences` as one shard directory `dir` (complete or absent, as above). Throws dp::Error
// when `dir` exists, when the sequences are inconsistent (offsets, segment starts, an id outside
// `vocab`, a sequence longer than max_seq_length) or empty, and for any write failure (the
// temporary is removed; nothing is left half-written).
void write_text_shard(const std::string& dir, const Sequences& sequences, const Vocabulary& vocab,
                      const TextShardProvenance& provenance);

// Writes `sequences` as a folder `dir` of shards shard_00000, shard_00001, ... of at most
// `sequences_per_shard` sequences each, the whole folder atomically (built under
// "<dir>.tmp.<pid>", then renamed). Returns the shard directories. Same errors as above.
std::vector<std::string> write_text_shards(const std::string& dir, const Sequences& sequences, const Vocabulary& vocab,
                                           const TextShardProvenance& provenance, size_t sequences_per_shard);

namespace detail {
// A file mapped read-only (PROT_READ, MAP_SHARED), unmapped on destruction. An empty file maps
// to nothing (data() == nullptr).
class MappedFile {
 public:
  MappedFile() = default;
  // Throws dp::Error naming `path` (and `what`, the role of the file, for the message).
  static MappedFile map(const std::string& path, std::string_view what);
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const unsigned char* data() const { return static_cast<const unsigned char*>(addr_); }
  size_t size() const { return size_; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};
}  // namespace detail

// One sequence's token ids as stored (uint16 or int32), read as int32. A view into the mapping:
// valid while its shard is.
class TokenIds {
 public:
  TokenIds(const void* data, size_t size, TokenDtype dtype) : data_(data), size_(size), dtype_(dtype) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  TokenDtype dtype() const { return dtype_; }
  int32_t operator[](size_t i) const {
    return dtype_ == TokenDtype::kUint16 ? static_cast<int32_t>(static_cast<const uint16_t*>(data_)[i])
                                         : static_cast<const int32_t*>(data_)[i];
  }
  // Copies the ids into out[0, size()); throws dp::Error when `out` is shorter.
  void copy_to(std::span<int32_t> out) const;
  std::vector<int32_t> to_vector() const;
  // The stored ids themselves; each throws dp::Error when the shard stores the other type.
  std::span<const uint16_t> as_uint16() const;
  std::span<const int32_t> as_int32() const;

 private:
  const void* data_;
  size_t size_;
  TokenDtype dtype_;
};

// One shard directory, memory-mapped read-only. Movable, not copyable; every const member may be
// called from several threads at once.
class TextShard {
 public:
  // Opens and checks `dir` (see the top of this file). Refuses a shard made with a vocabulary
  // whose fingerprint differs from `expected`'s, naming both vocab.txt files. Every error names
  // the shard's file at fault and what to do.
  static TextShard open(const std::string& dir, const Vocabulary& expected);

  const std::string& dir() const { return dir_; }
  const TextShardMeta& meta() const { return meta_; }
  size_t size() const { return lengths_.size(); }
  uint64_t num_tokens() const { return meta_.num_tokens; }
  int max_seq_length() const { return meta_.max_seq_length; }
  TokenDtype token_dtype() const { return meta_.token_dtype; }

  // Sequence i (< size(); throws dp::Error otherwise).
  size_t length(size_t i) const;
  TokenIds tokens(size_t i) const;
  int32_t segment_b_start(size_t i) const;
  // Every sequence's length, in order (for length-aware batching).
  std::span<const int32_t> lengths() const { return lengths_; }

 private:
  TextShard() = default;

  std::string dir_;
  TextShardMeta meta_;
  detail::MappedFile tokens_, offsets_, segments_;
  std::vector<int32_t> lengths_;
};

// Several shards indexed as one: sequence i of the dataset is sequence i - start(k) of shard k.
class TextDataset {
 public:
  // Opens every "shard_*" directory of `path` in name order (names containing ".tmp." are
  // write temporaries and are skipped), or `path` itself when it is one shard (holds meta.json).
  // The shards must agree on max_seq_length. Throws dp::Error naming `path` when it holds no
  // shard, and any TextShard::open error.
  static TextDataset open(const std::string& path, const Vocabulary& expected);

  const std::string& path() const { return path_; }
  size_t size() const { return lengths_.size(); }
  uint64_t num_tokens() const { return num_tokens_; }
  int max_seq_length() const { return shards_.front().max_seq_length(); }
  size_t num_shards() const { return shards_.size(); }
  const TextShard& shard(size_t k) const { return shards_.at(k); }  // std::out_of_range past the end

  // {shard, index inside it} of sequence i (< size(); throws dp::Error otherwise).
  std::pair<size_t, size_t> locate(size_t i) const;
  size_t length(size_t i) const;
  TokenIds tokens(size_t i) const;
  int32_t segment_b_start(size_t i) const;
  std::span<const int32_t> lengths() const { return lengths_; }

 private:
  std::string path_;
  std::vector<TextShard> shards_;
  std::vector<size_t> starts_;  // starts_[k]: the dataset index of shard k's first sequence
  std::vector<int32_t> lengths_;
  uint64_t num_tokens_ = 0;
};

}  // namespace dp::text
