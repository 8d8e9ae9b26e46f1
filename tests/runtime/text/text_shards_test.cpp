// Text shards on disk: write then open (ids, lengths, segments, meta), the atomic write (no
// temporary left, an existing shard never replaced), the refusals at open (another vocabulary,
// truncated or missing files, another format version, inconsistent offsets, ids outside the
// vocabulary), int32 ids for large vocabularies, folders of shards as one dataset, and the
// whole Fortune corpus end to end (with its speed printed).
#include "runtime/text/text_shards.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/expect_error.h"
#include "runtime/core/hash.h"
#include "runtime/text/vocab_builder.h"

namespace dp::text {
namespace {

namespace fs = std::filesystem;
using dp::testing::error_of;

std::vector<std::string> counting_tokens(int n) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int k = 0; k < n; ++k) tokens.push_back("w" + std::to_string(k));
  return tokens;
}

// A corpus of 40 documents of words w0, w1, ... (each word once, in order).
std::vector<Document> counting_documents() {
  std::vector<Document> docs;
  int next = 0;
  for (int d = 0; d < 40; ++d) {
    Document doc;
    for (int s = 0; s < 1 + d % 5; ++s) {
      std::string text;
      for (int w = 0; w < 1 + (d * 7 + s * 3) % 5; ++w) text += " w" + std::to_string(next++);
      doc.sentences.push_back(text);
    }
    docs.push_back(doc);
  }
  return docs;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

class TextShards : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("dptrain-shards-" + std::to_string(::getpid()) + "-" + test->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    vocab_ = std::make_shared<Vocabulary>(counting_tokens(600));
    const Tokenizer tokenizer(vocab_);
    corpus_ = tokenize_documents(counting_documents(), tokenizer, "counting.txt");
    provenance_.corpus_format = CorpusFormat::kFortune;
    provenance_.sequence_options = {.max_seq_length = 16, .seed = 99};
    provenance_.sources = corpus_.files;
    sequences_ = make_sequences(corpus_, *vocab_, provenance_.sequence_options);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // The shard written to dir_/shard.
  std::string write_shard() {
    const std::string shard = (dir_ / "shard").string();
    write_text_shard(shard, sequences_, *vocab_, provenance_);
    return shard;
  }

  void expect_same_sequences(const TextDataset& data, const Sequences& seqs) {
    ASSERT_EQ(data.size(), seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_EQ(data.length(i), seqs.length(i)) << i;
      ASSERT_EQ(data.segment_b_start(i), seqs.segment_b_start(i)) << i;
      const std::span<const int32_t> want = seqs.tokens(i);
      ASSERT_EQ(data.tokens(i).to_vector(), std::vector<int32_t>(want.begin(), want.end())) << i;
    }
  }

  fs::path dir_;
  std::shared_ptr<Vocabulary> vocab_;
  TokenizedCorpus corpus_;
  TextShardProvenance provenance_;
  Sequences sequences_;
};

TEST_F(TextShards, WriteThenOpenRoundTrips) {
  ASSERT_GT(sequences_.size(), 20u);
  const std::string dir = write_shard();
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"meta.json", "offsets.bin", "segments.bin", "tokens.bin"}));
  const TextShard shard = TextShard::open(dir, *vocab_);
  ASSERT_EQ(shard.size(), sequences_.size());
  EXPECT_EQ(shard.num_tokens(), sequences_.ids.size());
  EXPECT_EQ(shard.token_dtype(), TokenDtype::kUint16);
  EXPECT_EQ(fs::file_size(fs::path(dir) / "tokens.bin"), 2 * sequences_.ids.size());
  for (size_t i = 0; i < shard.size(); ++i) {
    ASSERT_EQ(shard.length(i), sequences_.length(i));
    ASSERT_EQ(shard.lengths()[i], static_cast<int32_t>(sequences_.length(i)));
    ASSERT_EQ(shard.segment_b_start(i), sequences_.segment_b_start(i));
    const TokenIds ids = shard.tokens(i);
    const std::span<const int32_t> want = sequences_.tokens(i);
    ASSERT_EQ(ids.to_vector(), std::vector<int32_t>(want.begin(), want.end()));
    ASSERT_EQ(ids.as_uint16().size(), want.size());
    for (size_t k = 0; k < ids.size(); ++k) ASSERT_EQ(ids[k], want[k]);
  }
  EXPECT_ERROR_CONTAINS(shard.tokens(shard.size()), "asked for");
  EXPECT_ERROR_CONTAINS(shard.tokens(0).as_int32(), "stores ids as uint16");
  const TextShardMeta& m = shard.meta();
  EXPECT_EQ(m.format_version, kTextShardFormatVersion);
  EXPECT_EQ(m.vocab_fingerprint, vocab_->fingerprint());
  EXPECT_EQ(m.vocab_size, vocab_->size());
  EXPECT_EQ(m.vocab_source, "(in memory)");
  EXPECT_EQ(m.max_seq_length, 16);
  EXPECT_EQ(m.num_sequences, sequences_.size());
  EXPECT_EQ(m.corpus_format, "fortune");
  EXPECT_EQ(m.seed, 99u);
  EXPECT_EQ(m.short_seq_prob, 0.1);
  EXPECT_EQ(m.dupe_factor, 1);
  EXPECT_EQ(m.shard_index, 0u);
  EXPECT_EQ(m.shard_count, 1u);
  ASSERT_EQ(m.sources.size(), 1u);
  EXPECT_EQ(m.sources[0].path, "counting.txt");
  EXPECT_EQ(m.sources[0].tokens, corpus_.ids.size());
  EXPECT_EQ(m.sources[0].documents, 40u);
  // The shard moves (its mappings with it).
  TextShard moved = TextShard::open(dir, *vocab_);
  TextShard other = std::move(moved);
  EXPECT_EQ(other.tokens(3).to_vector(), shard.tokens(3).to_vector());
}

TEST_F(TextShards, WriteIsAtomicAndNeverReplacesAShard) {
  const std::string dir = write_shard();
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"shard"})) << "no temporary left beside it";
  const std::string tokens_before = read_bytes(fs::path(dir) / "tokens.bin");
  const std::string meta_before = read_bytes(fs::path(dir) / "meta.json");
  // Writing again (other data) is refused, and the shard is untouched.
  Sequences other = sequences_;
  other.ids[1] = 7;
  EXPECT_EQ(error_of([&] { write_text_shard(dir, other, *vocab_, provenance_); }),
            "text shard: '" + dir +
                "' exists already; it is kept as it is: remove it, or choose another output directory, to prepare "
                "the text again");
  EXPECT_EQ(read_bytes(fs::path(dir) / "tokens.bin"), tokens_before);
  EXPECT_EQ(read_bytes(fs::path(dir) / "meta.json"), meta_before);
  // An empty directory in the way is not replaced either.
  fs::create_directory(dir_ / "empty");
  EXPECT_ERROR_CONTAINS(write_text_shard((dir_ / "empty").string(), sequences_, *vocab_, provenance_),
                        "exists already");
  // A refused write leaves nothing behind.
  Sequences bad = sequences_;
  bad.ids[5] = 100000;
  EXPECT_ERROR_CONTAINS(write_text_shard((dir_ / "bad").string(), bad, *vocab_, provenance_),
                        "has id 100000, outside vocabulary");
  Sequences too_long = sequences_;
  too_long.offsets.back() += 1;
  EXPECT_ERROR_CONTAINS(write_text_shard((dir_ / "bad").string(), too_long, *vocab_, provenance_), "offsets run");
  EXPECT_ERROR_CONTAINS(write_text_shard((dir_ / "bad").string(), Sequences{}, *vocab_, provenance_),
                        "no sequences to write");
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"empty", "shard"}));
  // A temporary this process left behind (a crash mid-write) is replaced by the next write.
  const fs::path stale = dir_ / ("again.tmp." + std::to_string(::getpid()));
  fs::create_directory(stale);
  write_bytes(stale / "tokens.bin", "half");
  write_text_shard((dir_ / "again").string(), sequences_, *vocab_, provenance_);
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"again", "empty", "shard"}));
  EXPECT_ERROR_CONTAINS(write_text_shard((dir_ / "..").string(), sequences_, *vocab_, provenance_), "exists already");
  EXPECT_ERROR_CONTAINS(write_text_shard("/", sequences_, *vocab_, provenance_), "does not name a new directory");
  EXPECT_EQ(TextShard::open((dir_ / "again").string(), *vocab_).size(), sequences_.size());
  // A source path that is not UTF-8 is stored (with U+FFFD); a trailing slash is fine.
  TextShardProvenance odd = provenance_;
  odd.sources[0].path = "caf\xE9.txt";
  write_text_shard((dir_ / "odd/").string(), sequences_, *vocab_, odd);
  EXPECT_EQ(TextShard::open((dir_ / "odd").string(), *vocab_).meta().sources[0].path, "caf\xEF\xBF\xBD.txt");
  // A missing parent is made.
  write_text_shard((dir_ / "a" / "b" / "c").string(), sequences_, *vocab_, provenance_);
  EXPECT_EQ(TextShard::open((dir_ / "a" / "b" / "c").string(), *vocab_).size(), sequences_.size());
}

TEST_F(TextShards, AnotherVocabularyIsRefused) {
  const std::string dir = write_shard();
  std::vector<std::string> tokens = counting_tokens(600);
  std::swap(tokens[10], tokens[11]);  // the same tokens with two ids swapped
  const Vocabulary swapped(tokens);
  EXPECT_EQ(error_of([&] { TextShard::open(dir, swapped); }),
            "shard " + dir + " was made with another vocabulary (fingerprint " + hex_digest(vocab_->fingerprint()) +
                ", 605 tokens, vocab.txt of (in memory)); this run's vocab (in memory) has fingerprint " +
                hex_digest(swapped.fingerprint()) + " (605 tokens): set data.vocab to the vocabulary the shards were made "
                "with, or make the shards again with dptrain prepare-text --vocab (in memory)");
  // From files, the message names both vocab.txt files.
  const fs::path made_with = dir_ / "vocab_a.txt", used = dir_ / "vocab_b.txt";
  std::string text_a, text_b;
  for (const std::string& t : counting_tokens(600)) text_a += t + "\n";
  for (const std::string& t : counting_tokens(601)) text_b += t + "\n";
  write_bytes(made_with, text_a);
  write_bytes(used, text_b);
  const Vocabulary from_file = Vocabulary::load(made_with.string());
  ASSERT_EQ(from_file.fingerprint(), vocab_->fingerprint());
  const std::string dir2 = (dir_ / "shard2").string();
  write_text_shard(dir2, sequences_, from_file, provenance_);
  const std::string message = error_of([&] { TextShard::open(dir2, Vocabulary::load(used.string())); });
  EXPECT_NE(message.find("vocab.txt of " + made_with.string() + "); this run's vocab " + used.string()),
            std::string::npos)
      << message;
  EXPECT_EQ(TextShard::open(dir2, *vocab_).size(), sequences_.size()) << "same tokens, wherever they were read";
  EXPECT_ERROR_CONTAINS(TextDataset::open(dir, swapped), "was made with another vocabulary");
}

TEST_F(TextShards, TruncatedOrMissingFilesAreRefused) {
  const std::string dir = write_shard();
  const fs::path tokens = fs::path(dir) / "tokens.bin";
  const std::string bytes = read_bytes(tokens);
  fs::resize_file(tokens, bytes.size() - 2);
  EXPECT_EQ(error_of([&] { TextShard::open(dir, *vocab_); }),
            "text shard " + dir + ": '" + tokens.string() + "' has " + std::to_string(bytes.size() - 2) +
                " bytes, but meta.json's " + std::to_string(bytes.size() / 2) + " tokens of uint16 need " +
                std::to_string(bytes.size()) +
                " (the file is truncated); run dptrain prepare-text again to remake it");
  write_bytes(tokens, bytes + "xx");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "(the file has extra bytes)");
  write_bytes(tokens, bytes);
  fs::resize_file(fs::path(dir) / "offsets.bin", 8);
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "offsets.bin' has 8 bytes");
  fs::remove(fs::path(dir) / "segments.bin");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_),
                        "cannot open segments file '" + (fs::path(dir) / "segments.bin").string() +
                            "': No such file or directory; run dptrain prepare-text again");
  fs::remove(fs::path(dir) / "meta.json");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_),
                        "cannot open '" + (fs::path(dir) / "meta.json").string() + "': No such file or directory");
}

TEST_F(TextShards, MetaJsonProblemsAreRefused) {
  const std::string dir = write_shard();
  const fs::path meta = fs::path(dir) / "meta.json";
  const std::string text = read_bytes(meta);
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string edited = text;
    const size_t at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    write_bytes(meta, edited);
  };
  edit("\"format_version\": 1", "\"format_version\": 2");
  EXPECT_EQ(error_of([&] { TextShard::open(dir, *vocab_); }),
            "text shard " + dir + ": '" + meta.string() +
                "' has format_version 2, but this dptrain reads text shards of version 1: run dptrain prepare-text "
                "again to remake it with this dptrain");
  edit("\"format\": \"dptrain text shard\"", "\"format\": \"something else\"");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "is not a dptrain text shard's meta.json");
  edit("\"token_dtype\": \"uint16\"", "\"token_dtype\": \"float\"");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "has token_dtype 'float'");
  edit("\"seed\"", "\"sead\"");
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "lacks a field or has one of the wrong type");
  write_bytes(meta, text.substr(0, text.size() / 2));
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "' is not valid JSON");
  edit("\"sequences\": ", "\"sequences\": 1");  // a count the files do not match
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "offsets.bin' has ");
}

TEST_F(TextShards, InconsistentOffsetsAndIdsAreRefused) {
  const std::string dir = write_shard();
  const fs::path offsets_path = fs::path(dir) / "offsets.bin";
  const std::string offsets = read_bytes(offsets_path);
  std::string edited = offsets;
  int64_t v = 1000;  // sequence 0 ends past sequence 1's end
  std::memcpy(edited.data() + 8, &v, 8);
  write_bytes(offsets_path, edited);
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_),
                        "'" + offsets_path.string() + "' is inconsistent: sequence 0 spans tokens [0, 1000)");
  edited = offsets;
  v = 1;
  std::memcpy(edited.data(), &v, 8);
  write_bytes(offsets_path, edited);
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "' starts at 1, not 0");
  write_bytes(offsets_path, offsets);

  const fs::path segments_path = fs::path(dir) / "segments.bin";
  const std::string segments = read_bytes(segments_path);
  edited = segments;
  const int32_t past = 99;
  std::memcpy(edited.data() + 4 * 2, &past, 4);
  write_bytes(segments_path, edited);
  EXPECT_ERROR_CONTAINS(TextShard::open(dir, *vocab_), "sequence 2 of length ");
  write_bytes(segments_path, segments);

  const fs::path tokens_path = fs::path(dir) / "tokens.bin";
  std::string tokens = read_bytes(tokens_path);
  const size_t at = static_cast<size_t>(sequences_.offsets[3]) + 1;  // sequence 3's second token
  tokens[2 * at] = '\xff';
  tokens[2 * at + 1] = '\xff';
  write_bytes(tokens_path, tokens);
  EXPECT_EQ(error_of([&] { TextShard::open(dir, *vocab_); }),
            "text shard " + dir + ": '" + tokens_path.string() + "' holds id 65535 (token " + std::to_string(at) +
                ", sequence 3) outside the vocabulary of 605 tokens; the file is damaged: run dptrain prepare-text "
                "again to remake it");
}

TEST_F(TextShards, LargeVocabularyStoresInt32) {
  const auto big = std::make_shared<Vocabulary>(counting_tokens(70000));
  EXPECT_EQ(token_dtype_for_vocab(65536), TokenDtype::kUint16);
  EXPECT_EQ(token_dtype_for_vocab(65537), TokenDtype::kInt32);
  Sequences seqs;
  seqs.append(std::vector<int32_t>{5, 65540, 70004}, std::vector<int32_t>{66000}, big->cls_id(), big->sep_id());
  seqs.append(std::vector<int32_t>{69999}, {}, big->cls_id(), big->sep_id());
  const std::string dir = (dir_ / "big").string();
  write_text_shard(dir, seqs, *big, provenance_);
  EXPECT_EQ(fs::file_size(fs::path(dir) / "tokens.bin"), 4 * seqs.ids.size());
  const TextShard shard = TextShard::open(dir, *big);
  EXPECT_EQ(shard.token_dtype(), TokenDtype::kInt32);
  EXPECT_EQ(shard.tokens(0).to_vector(), (std::vector<int32_t>{2, 5, 65540, 70004, 3, 66000, 3}));
  EXPECT_EQ(shard.segment_b_start(0), 5);
  EXPECT_EQ(shard.tokens(1).to_vector(), (std::vector<int32_t>{2, 69999, 3}));
  EXPECT_EQ(shard.segment_b_start(1), 3);
  EXPECT_EQ(shard.tokens(1).as_int32()[1], 69999);
  EXPECT_ERROR_CONTAINS(shard.tokens(0).as_uint16(), "stores ids as int32");
  std::vector<int32_t> room(2);
  EXPECT_ERROR_CONTAINS(shard.tokens(0).copy_to(room), "room for 2 ids");
}

TEST_F(TextShards, FolderOfShardsIsOneDataset) {
  const std::string folder = (dir_ / "data").string();
  const std::vector<std::string> shards = write_text_shards(folder, sequences_, *vocab_, provenance_, 7);
  const size_t count = (sequences_.size() + 6) / 7;
  ASSERT_EQ(shards.size(), count);
  EXPECT_EQ(shards[0], (fs::path(folder) / "shard_00000").string());
  EXPECT_EQ(entries(dir_), (std::vector<std::string>{"data"}));
  // Things that are not shards are ignored: a crashed write's temporary, a file, another folder.
  fs::create_directory(fs::path(folder) / "shard_00099.tmp.12345");
  write_bytes(fs::path(folder) / "notes.txt", "hi");
  fs::create_directory(fs::path(folder) / "logs");
  const TextDataset data = TextDataset::open(folder, *vocab_);
  EXPECT_EQ(data.num_shards(), count);
  EXPECT_EQ(data.num_tokens(), sequences_.ids.size());
  EXPECT_EQ(data.max_seq_length(), 16);
  expect_same_sequences(data, sequences_);
  EXPECT_EQ(data.locate(0), (std::pair<size_t, size_t>{0, 0}));
  EXPECT_EQ(data.locate(7), (std::pair<size_t, size_t>{1, 0}));
  EXPECT_EQ(data.locate(sequences_.size() - 1), (std::pair<size_t, size_t>{count - 1, (sequences_.size() - 1) % 7}));
  EXPECT_ERROR_CONTAINS(data.locate(sequences_.size()), "asked for");
  ASSERT_EQ(data.lengths().size(), sequences_.size());
  for (size_t i = 0; i < sequences_.size(); ++i) ASSERT_EQ(data.lengths()[i], static_cast<int32_t>(sequences_.length(i)));
  EXPECT_EQ(data.shard(1).meta().shard_index, 1u);
  EXPECT_EQ(data.shard(1).meta().shard_count, count);
  // One shard directory opens as a dataset of one.
  const TextDataset one = TextDataset::open(shards[1], *vocab_);
  EXPECT_EQ(one.num_shards(), 1u);
  EXPECT_EQ(one.size(), 7u);
  // The folder is written whole or not at all.
  EXPECT_ERROR_CONTAINS(write_text_shards(folder, sequences_, *vocab_, provenance_, 7), "exists already");
}

TEST_F(TextShards, DatasetProblemsAreRefused) {
  fs::create_directory(dir_ / "empty");
  EXPECT_EQ(error_of([&] { TextDataset::open((dir_ / "empty").string(), *vocab_); }),
            "text data '" + (dir_ / "empty").string() +
                "' holds no shard (no meta.json and no shard_* directories): run dptrain prepare-text to make them");
  EXPECT_ERROR_CONTAINS(TextDataset::open((dir_ / "absent").string(), *vocab_), "is not a directory");
  // Shards of different max_seq_length in one folder.
  write_text_shard((dir_ / "mixed" / "shard_a").string(), sequences_, *vocab_, provenance_);
  TextShardProvenance longer = provenance_;
  longer.sequence_options.max_seq_length = 32;
  write_text_shard((dir_ / "mixed" / "shard_b").string(), sequences_, *vocab_, longer);
  EXPECT_ERROR_CONTAINS(TextDataset::open((dir_ / "mixed").string(), *vocab_), "has max_seq_length 32 but shard");
  // A damaged shard among good ones is named.
  write_text_shards((dir_ / "damaged").string(), sequences_, *vocab_, provenance_, 10);
  fs::resize_file(dir_ / "damaged" / "shard_00001" / "segments.bin", 4);
  EXPECT_ERROR_CONTAINS(TextDataset::open((dir_ / "damaged").string(), *vocab_),
                        (dir_ / "damaged" / "shard_00001" / "segments.bin").string() + "' has 4 bytes");
}

// ---- The Fortune corpus end to end -------------------------------------------------------------

TEST_F(TextShards, FortuneCorpusEndToEnd) {
  if (!fs::is_directory(std::string(kFortuneDirectory))) {
    GTEST_SKIP() << kFortuneDirectory << " is absent (apt-get install -y fortunes provides it)";
  }
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  const std::vector<std::string> files = fortune_files();
  uint64_t bytes = 0;
  for (const std::string& f : files) bytes += fs::file_size(f);
  const auto vocab = std::make_shared<Vocabulary>(build_vocabulary(files, CorpusFormat::kFortune, 8000));
  const Tokenizer tokenizer(vocab);

  const auto t0 = Clock::now();
  const TokenizedCorpus one_thread = tokenize_files(files, CorpusFormat::kFortune, tokenizer, {.threads = 1});
  const auto t1 = Clock::now();
  const TokenizedCorpus corpus = tokenize_files(files, CorpusFormat::kFortune, tokenizer);
  const auto t2 = Clock::now();
  TextShardProvenance provenance{CorpusFormat::kFortune, {.max_seq_length = 128, .seed = 1}, corpus.files};
  const Sequences seqs = make_sequences(corpus, *vocab, provenance.sequence_options);
  const auto t3 = Clock::now();
  const std::string out = (dir_ / "fortunes").string();
  write_text_shards(out, seqs, *vocab, provenance, 4096);
  const auto t4 = Clock::now();
  const TextDataset data = TextDataset::open(out, *vocab);
  const auto t5 = Clock::now();

  EXPECT_EQ(one_thread.ids, corpus.ids);
  EXPECT_EQ(corpus.files.size(), files.size());
  size_t unk = 0;
  for (const int32_t id : corpus.ids) unk += id == vocab->unk_id();
  EXPECT_LT(unk, corpus.ids.size() / 100) << "the vocabulary spells nearly everything";
  expect_same_sequences(data, seqs);
  const double mb = static_cast<double>(bytes) / 1e6;
  const double tokenize_1 = seconds(t0, t1), tokenize_n = seconds(t1, t2), sequences = seconds(t2, t3),
               write = seconds(t3, t4), open = seconds(t4, t5);
  std::printf(
      "[ fortunes ] %zu files, %.2f MB, %zu documents, %zu sentences, %zu tokens ([UNK] %.3f %%), vocab %zu tokens\n"
      "[ fortunes ] tokenize 1 thread %.3f s (%.1f MB/s); %u threads %.3f s (%.1f MB/s)\n"
      "[ fortunes ] make_sequences %.3f s -> %zu sequences (mean length %.1f); write %zu shards %.3f s; open + check "
      "%.3f s\n"
      "[ fortunes ] tokenize (all threads) + sequences + write: %.3f s = %.1f MB/s of text\n",
      files.size(), mb, corpus.num_documents(), corpus.num_sentences(), corpus.ids.size(),
      100.0 * static_cast<double>(unk) / static_cast<double>(corpus.ids.size()), vocab->size(), tokenize_1,
      mb / tokenize_1, std::thread::hardware_concurrency(), tokenize_n, mb / tokenize_n, sequences, seqs.size(),
      static_cast<double>(seqs.ids.size()) / static_cast<double>(seqs.size()), data.num_shards(), write, open,
      tokenize_n + sequences + write, mb / (tokenize_n + sequences + write));
  RecordProperty("fortune_mb", std::to_string(mb));
  RecordProperty("tokenize_shard_mb_per_s", std::to_string(mb / (tokenize_n + sequences + write)));
}

}  // namespace
}  // namespace dp::text
