#include "runtime/text/corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <thread>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp::text {
namespace {

namespace fs = std::filesystem;

// ---- Reading and checking files ----------------------------------------------------------------

std::string read_whole_file(const std::string& path) {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  DP_CHECK(file.fd >= 0, "cannot open corpus file '", path, "': ", std::strerror(errno),
           " (check the path, and that it is readable)");
  struct stat st{};
  DP_CHECK(::fstat(file.fd, &st) == 0, "cannot stat corpus file '", path, "': ", std::strerror(errno));
  DP_CHECK(!S_ISDIR(st.st_mode), "corpus file '", path,
           "' is a directory; name the text files in it (for fortunes, every file without .dat/.u8)");
  // Sized from fstat plus a spare byte that sees the end; a pipe grows as it comes.
  std::string bytes(S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) + 1 : size_t{1} << 16, '\0');
  size_t size = 0;
  for (;;) {
    if (size == bytes.size()) bytes.resize(2 * size);
    const ssize_t got = ::read(file.fd, bytes.data() + size, bytes.size() - size);
    if (got < 0 && errno == EINTR) continue;
    DP_CHECK(got >= 0, "reading corpus file '", path, "' failed: ", std::strerror(errno));
    if (got == 0) break;
    size += static_cast<size_t>(got);
  }
  bytes.resize(size);
  return bytes;
}

size_t line_of(std::string_view text, size_t offset) {
  return 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

std::string hex_byte(unsigned char b) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 15];
}

// Length of the UTF-8 sequence at p[0..n) (n >= 1, p[0] >= 0x80), or 0 when it is not one
// (truncated, overlong, a surrogate, beyond U+10FFFF, a stray continuation byte).
size_t utf8_sequence_length(const unsigned char* p, size_t n) {
  const unsigned char c = p[0];
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    return 0;
  }
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((p[k] & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Throws unless `text` is UTF-8 without NUL bytes: binary files are refused with the offset.
void check_text(std::string_view text, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes without a zero at a time: (w - 0x01..) & ~w & 0x80.. flags a zero byte.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      constexpr uint64_t kLow = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
      if ((w & kHigh) == 0 && ((w - kLow) & ~w & kHigh) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c == 0) {
      throw Error(dp::detail::concat("corpus file '", name, "' looks binary: a NUL byte at offset ", i, " (line ",
                                 line_of(text, i), "); the corpus must be UTF-8 text files (for fortunes, leave out "
                                 "the .dat index files)"));
    }
    if (c < 0x80) {
      ++i;
      continue;
    }
    const size_t len = utf8_sequence_length(p + i, n - i);
    if (len == 0) {
      throw Error(dp::detail::concat("corpus file '", name, "' is not UTF-8 text: byte ", hex_byte(c), " at offset ", i,
                                 " (line ", line_of(text, i), ") does not start a valid UTF-8 sequence; convert the "
                                 "file (e.g. iconv -f latin1 -t utf-8) or leave it out if it is binary"));
    }
    i += len;
  }
}

// ---- Documents ---------------------------------------------------------------------------------

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Overstriking as a terminal shows it: a backspace takes back the character before it (a whole
// UTF-8 sequence), so "_\bx" and "x\bx" are "x".
std::string resolve_overstrike(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (const char c : line) {
    if (c != '\b') {
      out.push_back(c);
      continue;
    }
    while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
    if (!out.empty()) out.pop_back();
  }
  return out;
}

// Calls on_sentence(std::string_view) for each sentence and on_document_end() after each
// document (possibly one without sentences). `text` is checked UTF-8.
template <typename OnSentence, typename OnDocumentEnd>
void visit_documents(std::string_view text, CorpusFormat format, OnSentence&& on_sentence,
                     OnDocumentEnd&& on_document_end) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::string resolved;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (format == CorpusFormat::kFortune && line.find('\b') != std::string_view::npos) {
      resolved = resolve_overstrike(line);
      line = resolved;
    }
    line = strip(line);
    if (format == CorpusFormat::kPlain) {
      if (line.empty()) {
        on_document_end();
      } else {
        on_sentence(line);
      }
    } else if (line == "%") {
      on_document_end();
    } else if (!line.empty()) {
      on_sentence(line);
    }
  }
  on_document_end();
}

std::string describe_files(const std::vector<std::string>& paths) {
  if (paths.empty()) return "(no files)";
  std::string out;
  const size_t shown = paths.size() <= 4 ? paths.size() : 3;
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + paths[i];
  if (shown < paths.size()) out += dp::detail::concat(" and ", paths.size() - shown, " more");
  return out;
}

// Tokenizes the documents of `text` onto the end of `out` (whose files it does not touch).
// Returns {documents, sentences, tokens} added.
struct Counts {
  uint64_t documents = 0, sentences = 0, tokens = 0;
};

Counts tokenize_text(std::string_view text, CorpusFormat format, const Tokenizer& tokenizer, TokenizedCorpus& out) {
  Counts counts;
  size_t document_sentences = 0;
  visit_documents(
      text, format,
      [&](std::string_view sentence) {
        const size_t before = out.ids.size();
        tokenizer.encode(sentence, out.ids);
        if (out.ids.size() == before) return;
        out.sentence_ends.push_back(static_cast<int64_t>(out.ids.size()));
        counts.tokens += out.ids.size() - before;
        ++counts.sentences;
        ++document_sentences;
      },
      [&] {
        if (document_sentences == 0) return;
        out.document_ends.push_back(static_cast<int64_t>(out.sentence_ends.size()));
        ++counts.documents;
        document_sentences = 0;
      });
  return counts;
}

TokenizedCorpus tokenize_file(const std::string& path, CorpusFormat format, const Tokenizer& tokenizer) {
  const std::string bytes = read_whole_file(path);
  check_text(bytes, path);
  TokenizedCorpus out;
  // A guess that avoids most regrowth: about one token per four bytes of English.
  out.ids.reserve(bytes.size() / 4 + 16);
  const Counts counts = tokenize_text(bytes, format, tokenizer, out);
  SourceFile file;
  file.path = path;
  file.bytes = bytes.size();
  file.fnv1a64 = Fnv1a().bytes(bytes.data(), bytes.size()).value();
  file.documents = counts.documents;
  file.sentences = counts.sentences;
  file.tokens = counts.tokens;
  out.files.push_back(std::move(file));
  return out;
}

// Appends `part` to `out`, shifting its ends.
void append_corpus(TokenizedCorpus& out, TokenizedCorpus&& part) {
  const auto id_shift = static_cast<int64_t>(out.ids.size());
  const auto sentence_shift = static_cast<int64_t>(out.sentence_ends.size());
  out.ids.insert(out.ids.end(), part.ids.begin(), part.ids.end());
  for (const int64_t e : part.sentence_ends) out.sentence_ends.push_back(e + id_shift);
  for (const int64_t e : part.document_ends) out.document_ends.push_back(e + sentence_shift);
  for (SourceFile& f : part.files) out.files.push_back(std::move(f));
}

void check_not_empty(const TokenizedCorpus& corpus, const std::string& files, size_t file_count) {
  DP_CHECK(!corpus.document_ends.empty(), "corpus ", files, ": no text to train on (", file_count,
           file_count == 1 ? " file" : " files",
           " read, no line gives a token: check that these are the right files and that their format, plain or "
           "fortune, is the one given)");
}

}  // namespace

// ---- Formats -----------------------------------------------------------------------------------

std::optional<CorpusFormat> parse_corpus_format(std::string_view name) {
  if (name == "plain") return CorpusFormat::kPlain;
  if (name == "fortune") return CorpusFormat::kFortune;
  return std::nullopt;
}

CorpusFormat corpus_format_from_name(std::string_view name) {
  const std::optional<CorpusFormat> format = parse_corpus_format(name);
  DP_CHECK(format.has_value(), "unknown corpus format '", name,
           "': use 'plain' (a sentence per line, blank lines between documents) or 'fortune' (documents "
           "separated by lines of '%')");
  return *format;
}

std::string_view corpus_format_name(CorpusFormat format) {
  return format == CorpusFormat::kPlain ? "plain" : "fortune";
}

std::vector<std::string> fortune_files(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  DP_CHECK(!ec, "cannot list fortune directory '", dir, "': ", ec.message(),
           " (install the corpus with `apt-get install -y fortunes`, or name other files)");
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".") || name.ends_with(".dat") || name.ends_with(".u8")) continue;
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec) || entry.is_symlink(type_ec)) continue;
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  DP_CHECK(!files.empty(), "fortune directory '", dir,
           "' holds no fortune files (plain files without .dat/.u8); install them with `apt-get install -y fortunes`");
  return files;
}

// ---- Documents ---------------------------------------------------------------------------------

std::vector<Document> parse_documents(std::string_view text, CorpusFormat format, const std::string& name) {
  check_text(text, name);
  std::vector<Document> documents(1);
  visit_documents(
      text, format, [&](std::string_view sentence) { documents.back().sentences.emplace_back(sentence); },
      [&] {
        if (!documents.back().sentences.empty()) documents.emplace_back();
      });
  documents.pop_back();  // the empty one after the last document
  return documents;
}

std::vector<Document> read_documents(const std::string& path, CorpusFormat format) {
  return parse_documents(read_whole_file(path), format, path);
}

// ---- Tokenizing --------------------------------------------------------------------------------

TokenizedCorpus tokenize_files(const std::vector<std::string>& paths, CorpusFormat format, const Tokenizer& tokenizer,
                               const TokenizeOptions& options) {
  DP_CHECK(!paths.empty(), "corpus: no files named: name the text files to read");
  DP_CHECK(options.threads >= 0, "tokenize_files: threads must be >= 0 (0: one per core), got ", options.threads);
  size_t threads = options.threads > 0 ? static_cast<size_t>(options.threads)
                                       : std::max<size_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, paths.size());

  std::vector<TokenizedCorpus> parts(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < paths.size();) {
      try {
        parts[i] = tokenize_file(paths[i], format, tokenizer);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
    for (std::thread& t : pool) t.join();
  }
  // The first error in file order, so the message does not depend on the threads.
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  TokenizedCorpus corpus;
  size_t total_ids = 0;
  for (const TokenizedCorpus& p : parts) total_ids += p.ids.size();
  corpus.ids.reserve(total_ids);
  for (TokenizedCorpus& p : parts) append_corpus(corpus, std::move(p));
  check_not_empty(corpus, describe_files(paths), paths.size());
  return corpus;
}

TokenizedCorpus tokenize_documents(const std::vector<Document>& documents, const Tokenizer& tokenizer,
                                   const std::string& name) {
  TokenizedCorpus corpus;
  SourceFile file;
  file.path = name;
  for (const Document& document : documents) {
    const size_t sentences_before = corpus.sentence_ends.size();
    for (const std::string& sentence : document.sentences) {
      const size_t before = corpus.ids.size();
      tokenizer.encode(sentence, corpus.ids);
      if (corpus.ids.size() == before) continue;
      corpus.sentence_ends.push_back(static_cast<int64_t>(corpus.ids.size()));
      ++file.sentences;
      file.tokens += corpus.ids.size() - before;
    }
    if (corpus.sentence_ends.size() == sentences_before) continue;
    corpus.document_ends.push_back(static_cast<int64_t>(corpus.sentence_ends.size()));
    ++file.documents;
  }
  corpus.files.push_back(std::move(file));
  check_not_empty(corpus, name, 1);
  return corpus;
}

// ---- Sequences ---------------------------------------------------------------------------------

void Sequences::append(std::span<const int32_t> a, std::span<const int32_t> b, int32_t cls_id, int32_t sep_id) {
  const size_t begin = ids.size();
  ids.push_back(cls_id);
  ids.insert(ids.end(), a.begin(), a.end());
  ids.push_back(sep_id);
  const size_t b_start = ids.size() - begin;
  if (!b.empty()) {
    ids.insert(ids.end(), b.begin(), b.end());
    ids.push_back(sep_id);
  }
  offsets.push_back(static_cast<int64_t>(ids.size()));
  segment_b_starts.push_back(static_cast<int32_t>(b.empty() ? ids.size() - begin : b_start));
}

namespace {

// Google's truncate_seq_pair on index ranges [a_begin, a_end) and [b_begin, b_end) of one buffer.
void truncate_pair(size_t& a_begin, size_t& a_end, size_t& b_begin, size_t& b_end, size_t limit, SplitMix64& rng) {
  for (;;) {
    const size_t a_len = a_end - a_begin, b_len = b_end - b_begin;
    if (a_len + b_len <= limit) return;
    const bool trim_a = a_len > b_len;
    size_t& begin = trim_a ? a_begin : b_begin;
    size_t& end = trim_a ? a_end : b_end;
    DP_ASSERT(end - begin >= 1);
    // Front or back at random, to add noise and avoid bias toward one end (Google's comment).
    if (rng.uniform() < 0.5) {
      ++begin;
    } else {
      --end;
    }
  }
}

}  // namespace

std::pair<TokenizedCorpus, TokenizedCorpus> split_documents(const TokenizedCorpus& corpus, size_t held_out,
                                                            uint64_t seed) {
  const size_t n = corpus.num_documents();
  DP_CHECK(held_out < n, "holding out ", held_out, " of ", n, " documents for evaluation would leave none to train on");
  // The first held_out entries of a seeded Fisher-Yates shuffle.
  std::vector<size_t> order(n);
  for (size_t d = 0; d < n; ++d) order[d] = d;
  SplitMix64 rng(SplitMix64::key(seed, 0x65'76'61'6c));  // "eval": apart from make_sequences' streams
  for (size_t i = 0; i < held_out; ++i) std::swap(order[i], order[i + rng.below(n - i)]);
  std::vector<bool> is_eval(n, false);
  for (size_t i = 0; i < held_out; ++i) is_eval[order[i]] = true;
  TokenizedCorpus train, eval;
  train.files = eval.files = corpus.files;
  for (size_t d = 0; d < n; ++d) {
    TokenizedCorpus& part = is_eval[d] ? eval : train;
    const auto [first, last] = corpus.document_sentences(d);
    for (size_t s = first; s < last; ++s) {
      const std::span<const int32_t> sentence = corpus.sentence(s);
      part.ids.insert(part.ids.end(), sentence.begin(), sentence.end());
      part.sentence_ends.push_back(static_cast<int64_t>(part.ids.size()));
    }
    part.document_ends.push_back(static_cast<int64_t>(part.sentence_ends.size()));
  }
  return {std::move(train), std::move(eval)};
}

Sequences make_sequences(const TokenizedCorpus& corpus, const Vocabulary& vocab, const SequenceOptions& options) {
  DP_CHECK(options.max_seq_length >= 5, "make_sequences: max_seq_length must be at least 5 ([CLS] a [SEP] b [SEP]), got ",
           options.max_seq_length);
  DP_CHECK(options.short_seq_prob >= 0.0 && options.short_seq_prob <= 1.0,
           "make_sequences: short_seq_prob must be in [0, 1], got ", options.short_seq_prob);
  DP_CHECK(options.dupe_factor >= 1, "make_sequences: dupe_factor must be at least 1, got ", options.dupe_factor);
  DP_CHECK(!corpus.document_ends.empty(), "make_sequences: the corpus has no document; nothing to train on");
  const int32_t cls_id = vocab.cls_id();
  const int32_t sep_id = vocab.sep_id();
  const size_t max_num_tokens = static_cast<size_t>(options.max_seq_length) - 3;

  Sequences out;
  // Each sequence keeps about max_seq_length - 3 of its chunk's tokens plus 3 specials.
  out.ids.reserve(static_cast<size_t>(options.dupe_factor) * (corpus.ids.size() + corpus.ids.size() / 8 + 64));
  std::vector<int32_t> chunk;  // the chunk's tokens back to back
  std::vector<size_t> chunk_sentence_ends;
  for (int pass = 0; pass < options.dupe_factor; ++pass) {
    for (size_t d = 0; d < corpus.num_documents(); ++d) {
      SplitMix64 rng(SplitMix64::key(options.seed, static_cast<uint64_t>(pass), d));
      size_t target = max_num_tokens;
      if (rng.uniform() < options.short_seq_prob) target = static_cast<size_t>(rng.between(2, static_cast<int64_t>(max_num_tokens)));
      const auto [first, last] = corpus.document_sentences(d);
      chunk.clear();
      chunk_sentence_ends.clear();
      for (size_t s = first; s < last; ++s) {
        const std::span<const int32_t> sentence = corpus.sentence(s);
        chunk.insert(chunk.end(), sentence.begin(), sentence.end());
        chunk_sentence_ends.push_back(chunk.size());
        if (s + 1 != last && chunk.size() < target) continue;
        // A is the first a_end sentences: all of a one-sentence chunk, else a random cut.
        const size_t sentences = chunk_sentence_ends.size();
        const size_t a_end_sentence =
            sentences >= 2 ? static_cast<size_t>(rng.between(1, static_cast<int64_t>(sentences) - 1)) : 1;
        size_t a_begin = 0, a_end = chunk_sentence_ends[a_end_sentence - 1];
        size_t b_begin = a_end, b_end = chunk.size();
        const size_t limit = b_begin == b_end ? max_num_tokens + 1 : max_num_tokens;
        truncate_pair(a_begin, a_end, b_begin, b_end, limit, rng);
        const std::span<const int32_t> all(chunk);
        out.append(all.subspan(a_begin, a_end - a_begin), all.subspan(b_begin, b_end - b_begin), cls_id, sep_id);
        chunk.clear();
        chunk_sentence_ends.clear();
      }
    }
  }
  return out;
}

}  // namespace dp::text
