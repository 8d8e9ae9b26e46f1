// Pretraining text: documents read from text files, tokenized, and cut into BERT training
// sequences [CLS] A [SEP] B [SEP] as Google BERT's create_pretraining_data.py does (without its
// next-sentence-prediction random negatives: B is always the text that follows A).
//
// Two file formats:
//   plain    Google BERT's input: one sentence (or paragraph) per line, documents separated by
//            blank lines (a line of only whitespace counts as blank).
//   fortune  Debian's `fortunes` files (/usr/share/games/fortunes/*): documents separated by a
//            line that is "%" alone. Inside a document every non-blank line is one sentence
//            (fortunes are wrapped prose, so a "sentence" is a line fragment: good enough).
//            Overstriking ("_\bx", "x\bx": a character, a backspace, a character, as the
//            fortune files use for underlined and bold text) is resolved to the last character
//            written; attribution lines ("\t\t-- Mark Twain") are kept as text.
// In both, leading and trailing whitespace of every line is dropped, "\r\n" line ends and a UTF-8
// byte order mark are accepted, and a document whose sentences all tokenize to nothing is dropped.
//
// Files must be UTF-8 text. A NUL byte or a byte sequence that is not UTF-8, anywhere in a file,
// is an error naming the file, the byte offset and the line (the whole file is checked, not only
// its beginning: the check is cheap beside tokenizing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/splitmix64.h"
#include "runtime/text/wordpiece.h"

namespace dp::text {

enum class CorpusFormat { kPlain, kFortune };

// "plain" / "fortune"; nullopt for another name.
std::optional<CorpusFormat> parse_corpus_format(std::string_view name);
// The same, throwing dp::Error that names the accepted names.
CorpusFormat corpus_format_from_name(std::string_view name);
std::string_view corpus_format_name(CorpusFormat format);

// The Debian fortunes directory and its largest file, the built-in demo corpus
// (`apt-get install -y fortunes` provides them).
inline constexpr std::string_view kFortuneDirectory = "/usr/share/games/fortunes";
inline constexpr std::string_view kFortuneDemoFile = "/usr/share/games/fortunes/fortunes";

// The fortune text files in `dir`, in name order: regular files (not symbolic links) whose names
// do not end in ".dat" (strfile's index) or ".u8" (links to the same text) and do not start with
// a dot. Throws dp::Error naming `dir` when it cannot be listed or holds none.
std::vector<std::string> fortune_files(const std::string& dir = std::string(kFortuneDirectory));

// One document as text: its sentences in order, each non-empty and without leading or trailing
// whitespace.
struct Document {
  std::vector<std::string> sentences;
  bool operator==(const Document&) const = default;
};

// The documents of `text` (a file's bytes; `name` is what messages call it). Documents without a
// sentence are not returned. Throws dp::Error naming `name` for a NUL byte or text that is not
// UTF-8.
std::vector<Document> parse_documents(std::string_view text, CorpusFormat format, const std::string& name);
// The same from a file; throws dp::Error naming the file (with strerror) when it cannot be read.
std::vector<Document> read_documents(const std::string& path, CorpusFormat format);

// What was read from one source file, for the shard's provenance.
struct SourceFile {
  std::string path;
  uint64_t bytes = 0;
  uint64_t fnv1a64 = 0;      // dp::Fnv1a over the file's bytes
  uint64_t documents = 0;    // documents with at least one token
  uint64_t sentences = 0;    // sentences with at least one token
  uint64_t tokens = 0;
};

// Tokenized documents, packed: sentence s is ids[sentence_ends[s-1] .. sentence_ends[s]) (from 0
// for s = 0), document d is sentences [document_ends[d-1], document_ends[d]). Every sentence and
// every document is non-empty.
struct TokenizedCorpus {
  std::vector<int32_t> ids;
  std::vector<int64_t> sentence_ends;
  std::vector<int64_t> document_ends;
  std::vector<SourceFile> files;

  size_t num_documents() const { return document_ends.size(); }
  size_t num_sentences() const { return sentence_ends.size(); }
  // Sentence range [first, last) of document d.
  std::pair<size_t, size_t> document_sentences(size_t d) const {
    return {d == 0 ? 0 : static_cast<size_t>(document_ends[d - 1]), static_cast<size_t>(document_ends[d])};
  }
  std::span<const int32_t> sentence(size_t s) const {
    const size_t begin = s == 0 ? 0 : static_cast<size_t>(sentence_ends[s - 1]);
    return std::span<const int32_t>(ids).subspan(begin, static_cast<size_t>(sentence_ends[s]) - begin);
  }
};

struct TokenizeOptions {
  // Files tokenized at once, one thread each; 0: std::thread::hardware_concurrency(). The result
  // does not depend on it (files are concatenated in the order given).
  int threads = 0;
};

// Reads and tokenizes `paths` in order (each file is read whole, one file per thread at a time;
// the text is not kept). Throws dp::Error naming the file for a file that cannot be read or is
// not UTF-8 text, and "corpus <files>: no text to train on ..." when no document has a token.
TokenizedCorpus tokenize_files(const std::vector<std::string>& paths, CorpusFormat format, const Tokenizer& tokenizer,
                               const TokenizeOptions& options = {});
// The same from documents in memory (tests); `name` stands for the files in messages.
TokenizedCorpus tokenize_documents(const std::vector<Document>& documents, const Tokenizer& tokenizer,
                                   const std::string& name = "(in memory)");

// The corpus's documents in two parts: `held_out` of them, a uniformly random choice drawn from
// SplitMix64 streams keyed by `seed`, for evaluation; the others for training. Both keep the
// documents' order and the corpus's source files. Throws dp::Error when held_out is not below the
// number of documents (training would get none).
std::pair<TokenizedCorpus, TokenizedCorpus> split_documents(const TokenizedCorpus& corpus, size_t held_out,
                                                            uint64_t seed);

// Options of make_sequences, after Google BERT's create_pretraining_data.py flags.
struct SequenceOptions {
  int max_seq_length = 128;     // at least 5: [CLS] a [SEP] b [SEP]
  double short_seq_prob = 0.1;  // chance that a document's target length is random in [2, max - 3]
  int dupe_factor = 1;          // passes over the corpus, each cutting the documents differently
  uint64_t seed = 12345;        // Google's default random_seed
};

// Training sequences packed back to back: sequence i is ids[offsets[i] .. offsets[i+1]), and its
// segment B (token type 1, which includes the final [SEP]) starts at index segment_b_starts[i]
// inside it; segment_b_starts[i] == length(i) when there is no B.
struct Sequences {
  std::vector<int32_t> ids;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> segment_b_starts;

  size_t size() const { return segment_b_starts.size(); }
  size_t length(size_t i) const { return static_cast<size_t>(offsets[i + 1] - offsets[i]); }
  std::span<const int32_t> tokens(size_t i) const {
    return std::span<const int32_t>(ids).subspan(static_cast<size_t>(offsets[i]), length(i));
  }
  int32_t segment_b_start(size_t i) const { return segment_b_starts[i]; }
  // Appends [CLS] a [SEP] b [SEP] (or [CLS] a [SEP] when b is empty).
  void append(std::span<const int32_t> a, std::span<const int32_t> b, int32_t cls_id, int32_t sep_id);
};

// Google BERT's create_instances_from_document for every document, dupe_factor times, without
// the next-sentence random negatives:
//   * a document's target length is max_seq_length - 3, or with probability short_seq_prob a
//     random length in [2, max_seq_length - 3] (drawn once per document and pass, as Google);
//   * its sentences are accumulated into a chunk until the chunk reaches the target length or
//     the document ends;
//   * a chunk of two or more sentences is split at a random sentence boundary into A and B; a
//     chunk of one sentence is all A, and the sequence is [CLS] A [SEP];
//   * the longer of A and B (B on a tie) loses a token from a random end until the pair fits
//     max_seq_length - 3 ([CLS] A [SEP] B [SEP]), or max_seq_length - 2 when B is empty.
// Sequences come in document order (pass by pass); the loader shuffles. Random numbers come from
// a SplitMix64 stream keyed by (seed, pass, document index), so the result depends on the seed
// and the corpus only (not on threads or on how the corpus was read). Needs [CLS] and [SEP] in
// `vocab`; throws dp::Error for bad options and for a corpus without a document.
Sequences make_sequences(const TokenizedCorpus& corpus, const Vocabulary& vocab, const SequenceOptions& options);

}  // namespace dp::text
