// BERT's WordPiece tokenizer: the vocabulary (vocab.txt), the basic tokenizer (clean, split on
// whitespace and punctuation, lower-case, strip accents) and greedy longest-match-first
// WordPiece, with the semantics of Google BERT's tokenization.py and Hugging Face's
// BertTokenizer, so a pretrained model's vocab.txt gives the ids the model was trained on.
//
// Text is UTF-8; Unicode data (categories, lower-casing, canonical decomposition) comes from
// utf8proc. Every const member function may be called from several threads at once: none keeps
// state between calls.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace dp::text {

inline constexpr std::string_view kPadToken = "[PAD]";
inline constexpr std::string_view kUnkToken = "[UNK]";
inline constexpr std::string_view kClsToken = "[CLS]";
inline constexpr std::string_view kSepToken = "[SEP]";
inline constexpr std::string_view kMaskToken = "[MASK]";
// Marks a WordPiece that continues a word ("##able" in "un ##aff ##able").
inline constexpr std::string_view kContinuationPrefix = "##";

namespace detail {
// Hashes std::string and std::string_view alike, so maps keyed by std::string can be searched
// with a view of part of a larger buffer without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
using StringSet = std::unordered_set<std::string, StringHash, std::equal_to<>>;
}  // namespace detail

// Token <-> id, id = the token's position (line index from 0 in vocab.txt).
class Vocabulary {
 public:
  // Reads BERT's vocab.txt: one UTF-8 token per line, "\r\n" line ends accepted, a UTF-8 byte
  // order mark before the first token ignored. Throws dp::Error naming the file for a file that
  // cannot be read, an empty file, an empty line, a line that is not UTF-8 and a duplicate token
  // (both lines named).
  static Vocabulary load(const std::string& path);

  // The same from tokens already in memory (tests; a vocabulary being built); the same checks,
  // with messages naming the index instead of the line.
  explicit Vocabulary(std::vector<std::string> tokens);

  size_t size() const { return tokens_.size(); }
  // Where the tokens came from, as messages name it: the path, or "(in memory)".
  const std::string& source() const { return source_; }
  // Names it anew: a vocabulary built in memory by the path it is about to be written to (data
  // shards record it, and messages name it).
  void set_source(std::string source) { source_ = std::move(source); }
  const std::vector<std::string>& tokens() const { return tokens_; }

  // The id of `token`, or nullopt when the vocabulary lacks it. Does not allocate.
  std::optional<int32_t> find(std::string_view token) const;
  // The id of "##" + `suffix` (a word-continuing piece), without building that string.
  std::optional<int32_t> find_continuation(std::string_view suffix) const;
  bool contains(std::string_view token) const { return find(token).has_value(); }
  // The id of `token`; throws dp::Error naming the vocabulary when it lacks it.
  int32_t id(std::string_view token) const;
  // The token with id `id`; throws dp::Error when `id` is out of range.
  const std::string& token(int32_t id) const;

  // Ids of the special tokens. Each throws dp::Error naming the vocabulary, and what the token is
  // needed for, when the vocabulary lacks it (contains() says beforehand).
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t cls_id() const;
  int32_t sep_id() const;
  int32_t mask_id() const;

  // Longest token in bytes, and longest continuation piece without its "##": no WordPiece
  // candidate longer than these can match, so the tokenizer does not look them up.
  size_t max_token_bytes() const { return max_token_bytes_; }
  size_t max_continuation_bytes() const { return max_continuation_bytes_; }

  // A stable 64-bit digest of the tokens in id order (dp::Fnv1a, each token followed by a
  // terminator), the same on every machine and build, so data shards can record which
  // vocabulary made them. Equal fingerprints mean the same tokens with the same ids (short of a
  // hash collision).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Vocabulary(std::vector<std::string> tokens, std::string source, bool from_file);
  int32_t special_id(std::optional<int32_t> id, std::string_view name, std::string_view purpose) const;

  std::string source_;
  std::vector<std::string> tokens_;
  detail::StringIdMap ids_;
  // "##xxx" tokens keyed by "xxx", so continuation lookups need no "##" + xxx string.
  detail::StringIdMap continuation_ids_;
  std::optional<int32_t> pad_, unk_, cls_, sep_, mask_;
  size_t max_token_bytes_ = 0;
  size_t max_continuation_bytes_ = 0;
  uint64_t fingerprint_ = 0;
};

struct BasicTokenizerOptions {
  bool lower_case = true;
  // Unset: strip accents iff lower_case (BERT's uncased models do, cased ones do not).
  std::optional<bool> strip_accents = std::nullopt;
  // Put spaces around CJK ideographs, so each becomes its own token.
  bool tokenize_chinese_chars = true;
  // Whitespace-delimited tokens kept exactly as written: not lower-cased, not split.
  std::vector<std::string> never_split = {std::string(kPadToken), std::string(kUnkToken), std::string(kClsToken),
                                          std::string(kSepToken), std::string(kMaskToken)};
};

// The basic tokens of one text packed into one buffer, so splitting a text costs a few
// allocations rather than one per token.
class BasicTokens {
 public:
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::string_view operator[](size_t i) const {
    const size_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(bytes_).substr(begin, ends_[i] - begin);
  }
  void clear() {
    bytes_.clear();
    ends_.clear();
  }

 private:
  friend class BasicTokenizer;
  std::string bytes_;         // the tokens back to back
  std::vector<size_t> ends_;  // token i ends at bytes_[ends_[i]]
};

// BERT's BasicTokenizer: drops NUL, U+FFFD and control characters (categories Cc and Cf);
// treats space, \t, \n, \r and Unicode space separators (Zs, and Zl/Zp, which Python's
// str.split also splits on) as whitespace; puts CJK ideographs on their own; splits on
// whitespace; lower-cases and strips accents (NFD, then drops nonspacing marks, Mn) when asked;
// makes each punctuation character (ASCII !-/ :-@ [-` {-~ and Unicode P*) its own token.
class BasicTokenizer {
 public:
  explicit BasicTokenizer(BasicTokenizerOptions options = {});

  // Throws dp::Error when `text` is not valid UTF-8 (the message gives the byte offset; the
  // caller knows and adds which file it came from).
  std::vector<std::string> tokenize(std::string_view text) const;
  // The same into `out` (cleared first), reusing its buffers.
  void split(std::string_view text, BasicTokens& out) const;

  bool is_never_split(std::string_view token) const {
    return !token.empty() && never_split_first_bytes_[static_cast<unsigned char>(token[0])] &&
           never_split_.find(token) != never_split_.end();
  }
  bool lower_case() const { return lower_case_; }
  bool strip_accents() const { return strip_accents_; }
  bool tokenize_chinese_chars() const { return tokenize_chinese_chars_; }

 private:
  // Appends the tokens of one whitespace-delimited word (code points in `word`, which it may
  // change) to `out`; `scratch` is reused between words.
  void add_word(std::vector<int32_t>& word, std::vector<int32_t>& scratch, BasicTokens& out) const;

  bool lower_case_;
  bool strip_accents_;
  bool tokenize_chinese_chars_;
  detail::StringSet never_split_;
  // First bytes of the never-split tokens: most words start with none of them ('[' for the
  // defaults), which settles is_never_split without hashing the word.
  std::bitset<256> never_split_first_bytes_;
};

// Greedy longest-match-first WordPiece over one basic token: the longest prefix in the
// vocabulary, then the longest "##" continuation of the rest, and so on. A word with more than
// max_input_chars_per_word code points, or one the vocabulary cannot spell completely, becomes a
// single [UNK].
class WordpieceTokenizer {
 public:
  static constexpr int kDefaultMaxInputCharsPerWord = 100;

  // Throws dp::Error when the vocabulary has no [UNK] or the limit is not positive.
  explicit WordpieceTokenizer(std::shared_ptr<const Vocabulary> vocab,
                              int max_input_chars_per_word = kDefaultMaxInputCharsPerWord);

  // Appends the ids of `word`'s pieces to `ids`; allocates nothing beyond growing `ids`.
  // `word` is one basic token (valid UTF-8, no whitespace); other bytes give a meaningless
  // segmentation but are read safely.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;
  std::vector<std::string> tokenize(std::string_view word) const;

  const Vocabulary& vocab() const { return *vocab_; }
  int max_input_chars_per_word() const { return max_input_chars_per_word_; }

 private:
  std::shared_ptr<const Vocabulary> vocab_;
  int32_t unk_id_;
  int max_input_chars_per_word_;
};

struct TokenizerOptions {
  BasicTokenizerOptions basic = {};
  int max_input_chars_per_word = WordpieceTokenizer::kDefaultMaxInputCharsPerWord;
};

// BertTokenizer: the basic tokenizer, then WordPiece on each basic token (a never-split token is
// looked up whole, [UNK] when the vocabulary lacks it). Copies share the vocabulary.
class Tokenizer {
 public:
  // Throws dp::Error when the vocabulary has no [UNK].
  explicit Tokenizer(Vocabulary vocab, TokenizerOptions options = {});
  explicit Tokenizer(std::shared_ptr<const Vocabulary> vocab, TokenizerOptions options = {});

  // The ids of `text` (no [CLS]/[SEP] added). Throws dp::Error when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;
  // The same, appended to `ids`, for a caller that reuses one buffer across texts.
  void encode(std::string_view text, std::vector<int32_t>& ids) const;
  // The pieces of `text`, as strings: "un", "##aff", "##able".
  std::vector<std::string> tokenize(std::string_view text) const;
  // Readable text for logs: pieces joined by spaces, a "##" piece glued to the one before it
  // (as BertTokenizer.convert_tokens_to_string). Lower-casing, accents and spacing around
  // punctuation are not restored. Throws dp::Error for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids) const;

  const Vocabulary& vocab() const { return wordpiece_.vocab(); }
  const BasicTokenizer& basic() const { return basic_; }
  const WordpieceTokenizer& wordpiece() const { return wordpiece_; }

 private:
  BasicTokenizer basic_;
  WordpieceTokenizer wordpiece_;
};

}  // namespace dp::text
