// BERT's WordPiece tokenizer (see wordpiece.h). The hot path works on code points and writes
// tokens into reused buffers: no allocation per character or per token, only when a buffer grows.
#include "runtime/text/wordpiece.h"

#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp::text {
namespace {

constexpr std::string_view kUtf8ByteOrderMark = "\xEF\xBB\xBF";
constexpr const char* kInMemorySource = "(in memory)";

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", b);
  return buf;
}

bool is_continuation_byte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Decodes the code point at bytes[at] into `cp` and returns its length in bytes, or 0 when the
// bytes there are not UTF-8 (truncated, overlong, a surrogate, beyond U+10FFFF).
size_t decode_utf8(std::string_view bytes, size_t at, int32_t& cp) {
  const auto lead = static_cast<unsigned char>(bytes[at]);
  if (lead < 0x80) {
    cp = lead;
    return 1;
  }
  utf8proc_int32_t decoded = -1;
  const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data() + at),
                                              static_cast<utf8proc_ssize_t>(bytes.size() - at), &decoded);
  if (n <= 0) return 0;
  cp = decoded;
  return static_cast<size_t>(n);
}

std::string invalid_utf8_detail(std::string_view bytes, size_t at) {
  return dp::detail::concat("byte ", hex_byte(static_cast<unsigned char>(bytes[at])), " at offset ", at,
                        " does not start a valid sequence (truncated, overlong, a surrogate or beyond U+10FFFF)");
}

inline void append_utf8(std::string& out, int32_t cp) {
  const auto c = static_cast<uint32_t>(cp);
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    const char s[2] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    out.append(s, 2);
  } else if (c < 0x10000) {
    const char s[3] = {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
                       static_cast<char>(0x80 | (c & 0x3F))};
    out.append(s, 3);
  } else {
    const char s[4] = {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
                       static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    out.append(s, 4);
  }
}

unsigned char first_utf8_byte(int32_t cp) {
  const auto c = static_cast<uint32_t>(cp);
  if (c < 0x80) return static_cast<unsigned char>(c);
  if (c < 0x800) return static_cast<unsigned char>(0xC0 | (c >> 6));
  if (c < 0x10000) return static_cast<unsigned char>(0xE0 | (c >> 12));
  return static_cast<unsigned char>(0xF0 | (c >> 18));
}

// BERT's _is_chinese_char: the CJK Unified Ideographs blocks and their extensions and
// compatibility blocks. Hiragana, Katakana and Hangul are not in it (they are written with
// spaces or are split by WordPiece like other scripts).
bool is_cjk_ideograph(int32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

enum class CharClass { kDrop, kSpace, kOther };

// BERT's _clean_text: NUL, U+FFFD and control characters go; whitespace becomes a space.
// \t \n \r are Cc but count as whitespace, so they are tested first.
CharClass classify(int32_t cp) {
  if (cp < 0x80) {
    if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return CharClass::kSpace;
    if (cp < 0x20 || cp == 0x7F) return CharClass::kDrop;  // NUL, the other C0 controls, DEL
    return CharClass::kOther;
  }
  if (cp == 0xFFFD) return CharClass::kDrop;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
      return CharClass::kDrop;
    // Zl and Zp (U+2028, U+2029) are not BERT's whitespace, but the str.split() after cleaning
    // splits on them, so they separate words all the same.
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return CharClass::kSpace;
    default:
      return CharClass::kOther;
  }
}

// BERT's _is_punctuation: all non-alphanumeric ASCII that is not space or control ($ + < = > ^ `
// | ~ are symbols in Unicode, punctuation here), and every Unicode P* character.
bool is_punctuation(int32_t cp) {
  if (cp < 0x80) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  }
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

int32_t to_lower(int32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp;
  return utf8proc_tolower(cp);
}

// Combining marks start at U+0300; everything below has class 0 and no lookup is needed.
int combining_class(int32_t cp) { return cp < 0x300 ? 0 : utf8proc_get_property(cp)->combining_class; }

// NFD's canonical ordering: each run of combining marks (class > 0) sorted stably by class.
// Runs are a few marks long, so insertion sort (no allocation) is the right tool.
void canonical_order(std::vector<int32_t>& cps) {
  for (size_t i = 1; i < cps.size(); ++i) {
    const int32_t cp = cps[i];
    const int cls = combining_class(cp);
    if (cls == 0) continue;
    size_t j = i;
    while (j > 0) {
      const int before = combining_class(cps[j - 1]);
      if (before == 0 || before <= cls) break;
      cps[j] = cps[j - 1];
      --j;
    }
    cps[j] = cp;
  }
}

// BERT's _run_strip_accents: NFD, then drop nonspacing marks (Mn), so "é" becomes "e".
void remove_accents(const std::vector<int32_t>& word, std::vector<int32_t>& out) {
  out.clear();
  bool decomposed = false;
  for (const int32_t cp : word) {
    // Nothing below U+00C0 (À) has a canonical decomposition.
    if (cp < 0xC0) {
      out.push_back(cp);
      continue;
    }
    decomposed = true;
    const size_t at = out.size();
    constexpr utf8proc_ssize_t kUsual = 4;  // canonical decompositions are at most 4 code points
    out.resize(at + kUsual);
    int boundclass = 0;  // unused without UTF8PROC_CHARBOUND
    utf8proc_ssize_t n = utf8proc_decompose_char(cp, out.data() + at, kUsual, UTF8PROC_DECOMPOSE, &boundclass);
    if (n > kUsual) {
      out.resize(at + static_cast<size_t>(n));
      n = utf8proc_decompose_char(cp, out.data() + at, n, UTF8PROC_DECOMPOSE, &boundclass);
    }
    DP_ASSERT(n >= 0);
    out.resize(at + static_cast<size_t>(n));
  }
  if (!decomposed) return;
  canonical_order(out);
  std::erase_if(out, [](int32_t cp) { return cp >= 0x300 && utf8proc_category(cp) == UTF8PROC_CATEGORY_MN; });
}

std::string read_vocab_file(const std::string& path) {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(path.c_str(), "rb"));
  DP_CHECK(file, "vocab ", path, ": cannot open: ", std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const size_t got = std::fread(buf, 1, sizeof buf, file.get());
    bytes.append(buf, got);
    if (got < sizeof buf) break;
  }
  // A directory opens but does not read (EISDIR); say so rather than "is empty".
  DP_CHECK(!std::ferror(file.get()), "vocab ", path, ": cannot read: ", std::strerror(errno));
  return bytes;
}

}  // namespace

// ---- Vocabulary -------------------------------------------------------------------------------

Vocabulary Vocabulary::load(const std::string& path) {
  const std::string bytes = read_vocab_file(path);
  std::string_view rest = bytes;
  // Some editors on Windows write one; it is not part of the first token.
  if (rest.starts_with(kUtf8ByteOrderMark)) rest.remove_prefix(kUtf8ByteOrderMark.size());
  std::vector<std::string> tokens;
  tokens.reserve(rest.size() / 8 + 1);  // BERT's vocab.txt averages about 7 bytes a line
  while (!rest.empty()) {
    const size_t newline = rest.find('\n');
    std::string_view line = rest.substr(0, newline);
    rest = newline == std::string_view::npos ? std::string_view() : rest.substr(newline + 1);
    if (line.ends_with('\r')) line.remove_suffix(1);
    tokens.emplace_back(line);
  }
  return Vocabulary(std::move(tokens), path, /*from_file=*/true);
}

Vocabulary::Vocabulary(std::vector<std::string> tokens)
    : Vocabulary(std::move(tokens), kInMemorySource, /*from_file=*/false) {}

Vocabulary::Vocabulary(std::vector<std::string> tokens, std::string source, bool from_file)
    : source_(std::move(source)), tokens_(std::move(tokens)) {
  // A file's problems are named by line (1-based, as editors count), a vector's by index.
  auto where = [from_file](size_t i) {
    return from_file ? dp::detail::concat("line ", i + 1) : dp::detail::concat("index ", i);
  };
  DP_CHECK(!tokens_.empty(), "vocab ", source_, ": is empty (BERT's vocab.txt has one token per line)");
  DP_CHECK(tokens_.size() <= static_cast<size_t>(INT32_MAX), "vocab ", source_, ": has ", tokens_.size(),
           " tokens; ids are 32-bit, so at most ", INT32_MAX, " fit");
  ids_.reserve(tokens_.size());
  Fnv1a digest;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& token = tokens_[i];
    DP_CHECK(!token.empty(), "vocab ", source_, ": ", where(i), " is empty (every ", from_file ? "line" : "entry",
             " is one token and its position is the token's id, so an empty one would give \"\" an id)");
    for (size_t at = 0, n = 0; at < token.size(); at += n) {
      int32_t cp = 0;
      n = decode_utf8(token, at, cp);
      DP_CHECK(n > 0, "vocab ", source_, ": ", where(i), " is not valid UTF-8: ", invalid_utf8_detail(token, at));
    }
    const auto [it, inserted] = ids_.emplace(token, static_cast<int32_t>(i));
    DP_CHECK(inserted, "vocab ", source_, ": token \"", token, "\" appears twice, on ",
             where(static_cast<size_t>(it->second)), " and on ", where(i), " (each token must have exactly one id)");
    max_token_bytes_ = std::max(max_token_bytes_, token.size());
    if (token.starts_with(kContinuationPrefix)) {
      const std::string_view suffix = std::string_view(token).substr(kContinuationPrefix.size());
      continuation_ids_.emplace(suffix, static_cast<int32_t>(i));
      max_continuation_bytes_ = std::max(max_continuation_bytes_, suffix.size());
    }
    digest.text(token);
  }
  fingerprint_ = digest.value();
  pad_ = find(kPadToken);
  unk_ = find(kUnkToken);
  cls_ = find(kClsToken);
  sep_ = find(kSepToken);
  mask_ = find(kMaskToken);
}

std::optional<int32_t> Vocabulary::find(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::optional<int32_t> Vocabulary::find_continuation(std::string_view suffix) const {
  const auto it = continuation_ids_.find(suffix);
  if (it == continuation_ids_.end()) return std::nullopt;
  return it->second;
}

int32_t Vocabulary::id(std::string_view token) const {
  const std::optional<int32_t> found = find(token);
  DP_CHECK(found, "vocab ", source_, ": has no token \"", token, "\"");
  return *found;
}

const std::string& Vocabulary::token(int32_t id) const {
  DP_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size(), "vocab ", source_, ": id ", id,
           " is out of range (the vocabulary has ", tokens_.size(), " tokens, ids 0 to ", tokens_.size() - 1, ")");
  return tokens_[static_cast<size_t>(id)];
}

int32_t Vocabulary::special_id(std::optional<int32_t> id, std::string_view name, std::string_view purpose) const {
  DP_CHECK(id, "vocab ", source_, ": has no ", name, " token (needed for ", purpose, ")");
  return *id;
}

int32_t Vocabulary::pad_id() const { return special_id(pad_, kPadToken, "padding sequences to a common length"); }
int32_t Vocabulary::unk_id() const { return special_id(unk_, kUnkToken, "words the vocabulary cannot spell"); }
int32_t Vocabulary::cls_id() const { return special_id(cls_, kClsToken, "the start of each sequence"); }
int32_t Vocabulary::sep_id() const { return special_id(sep_, kSepToken, "the end of each segment"); }
int32_t Vocabulary::mask_id() const { return special_id(mask_, kMaskToken, "masked-LM masking"); }

// ---- BasicTokenizer ---------------------------------------------------------------------------

BasicTokenizer::BasicTokenizer(BasicTokenizerOptions options)
    : lower_case_(options.lower_case),
      strip_accents_(options.strip_accents.value_or(options.lower_case)),
      tokenize_chinese_chars_(options.tokenize_chinese_chars),
      never_split_(std::make_move_iterator(options.never_split.begin()),
                   std::make_move_iterator(options.never_split.end())) {
  for (const std::string& token : never_split_) {
    if (!token.empty()) never_split_first_bytes_.set(static_cast<unsigned char>(token[0]));
  }
}

std::vector<std::string> BasicTokenizer::tokenize(std::string_view text) const {
  BasicTokens tokens;
  split(text, tokens);
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) out.emplace_back(tokens[i]);
  return out;
}

void BasicTokenizer::split(std::string_view text, BasicTokens& out) const {
  out.clear();
  out.bytes_.reserve(text.size());
  std::vector<int32_t> word, scratch;
  auto flush = [&] {
    if (word.empty()) return;
    add_word(word, scratch, out);
    word.clear();
  };
  for (size_t at = 0, n = 0; at < text.size(); at += n) {
    int32_t cp = 0;
    n = decode_utf8(text, at, cp);
    DP_CHECK(n > 0, "text is not valid UTF-8: ", invalid_utf8_detail(text, at));
    switch (classify(cp)) {
      case CharClass::kDrop:
        break;
      case CharClass::kSpace:
        flush();
        break;
      case CharClass::kOther:
        if (tokenize_chinese_chars_ && is_cjk_ideograph(cp)) {
          // _tokenize_chinese_chars puts spaces around it: a word of its own.
          flush();
          word.push_back(cp);
          flush();
        } else {
          word.push_back(cp);
        }
        break;
    }
  }
  flush();
}

void BasicTokenizer::add_word(std::vector<int32_t>& word, std::vector<int32_t>& scratch, BasicTokens& out) const {
  std::string& bytes = out.bytes_;
  const size_t start = bytes.size();
  if (never_split_first_bytes_[first_utf8_byte(word.front())]) {
    for (const int32_t cp : word) append_utf8(bytes, cp);
    if (is_never_split(std::string_view(bytes).substr(start))) {
      out.ends_.push_back(bytes.size());
      return;
    }
    bytes.resize(start);
  }
  if (lower_case_) {
    for (int32_t& cp : word) cp = to_lower(cp);
  }
  const std::vector<int32_t>* chars = &word;
  if (strip_accents_) {
    remove_accents(word, scratch);
    chars = &scratch;
  }
  // _run_split_on_punc: each punctuation character is a token, the runs between them are tokens.
  // A word reduced to nothing (only combining marks, stripped) gives no token.
  auto close_token = [&] {
    if (bytes.size() > (out.ends_.empty() ? 0 : out.ends_.back())) out.ends_.push_back(bytes.size());
  };
  for (const int32_t cp : *chars) {
    if (is_punctuation(cp)) {
      close_token();
      append_utf8(bytes, cp);
      out.ends_.push_back(bytes.size());
    } else {
      append_utf8(bytes, cp);
    }
  }
  close_token();
}

// ---- WordpieceTokenizer -----------------------------------------------------------------------

WordpieceTokenizer::WordpieceTokenizer(std::shared_ptr<const Vocabulary> vocab, int max_input_chars_per_word)
    : vocab_(std::move(vocab)), unk_id_(-1), max_input_chars_per_word_(max_input_chars_per_word) {
  DP_CHECK(vocab_ != nullptr, "wordpiece: no vocabulary given (a null std::shared_ptr<const Vocabulary>)");
  unk_id_ = vocab_->unk_id();
  DP_CHECK(max_input_chars_per_word_ > 0, "wordpiece: max_input_chars_per_word must be positive, got ",
           max_input_chars_per_word_);
}

void WordpieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  size_t chars = 0;
  for (const char c : word) chars += is_continuation_byte(c) ? 0 : 1;
  if (chars > static_cast<size_t>(max_input_chars_per_word_)) {
    ids.push_back(unk_id_);
    return;
  }
  const Vocabulary& vocab = *vocab_;
  const size_t first_piece = ids.size();
  for (size_t start = 0; start < word.size();) {
    // Candidates longer than the longest token cannot match; start at that length, on a
    // character boundary (an answer identical to starting at the end of the word, sooner).
    const size_t longest = start == 0 ? vocab.max_token_bytes() : vocab.max_continuation_bytes();
    size_t end = word.size();
    if (end - start > longest) {
      end = start + longest;
      while (end > start && is_continuation_byte(word[end])) --end;
    }
    std::optional<int32_t> piece;
    while (end > start) {
      const std::string_view candidate = word.substr(start, end - start);
      piece = start == 0 ? vocab.find(candidate) : vocab.find_continuation(candidate);
      if (piece) break;
      do {
        --end;
      } while (end > start && is_continuation_byte(word[end]));
    }
    if (!piece) {
      // No piece fits here: BERT gives up on the whole word, not just the rest of it.
      ids.resize(first_piece);
      ids.push_back(unk_id_);
      return;
    }
    ids.push_back(*piece);
    start = end;
  }
}

std::vector<std::string> WordpieceTokenizer::tokenize(std::string_view word) const {
  std::vector<int32_t> ids;
  encode_word(word, ids);
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) pieces.push_back(vocab_->token(id));
  return pieces;
}

// ---- Tokenizer --------------------------------------------------------------------------------

Tokenizer::Tokenizer(Vocabulary vocab, TokenizerOptions options)
    : Tokenizer(std::make_shared<const Vocabulary>(std::move(vocab)), std::move(options)) {}

Tokenizer::Tokenizer(std::shared_ptr<const Vocabulary> vocab, TokenizerOptions options)
    : basic_(std::move(options.basic)), wordpiece_(std::move(vocab), options.max_input_chars_per_word) {}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  encode(text, ids);
  return ids;
}

void Tokenizer::encode(std::string_view text, std::vector<int32_t>& ids) const {
  BasicTokens tokens;
  basic_.split(text, tokens);
  ids.reserve(ids.size() + tokens.size() + tokens.size() / 4);  // most words are one piece
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string_view token = tokens[i];
    // As BertTokenizer: a never-split token is looked up whole, never broken into pieces.
    if (basic_.is_never_split(token)) {
      ids.push_back(vocab().find(token).value_or(vocab().unk_id()));
    } else {
      wordpiece_.encode_word(token, ids);
    }
  }
}

std::vector<std::string> Tokenizer::tokenize(std::string_view text) const {
  const std::vector<int32_t> ids = encode(text);
  std::vector<std::string> pieces;
  pieces.reserve(ids.size());
  for (const int32_t id : ids) pieces.push_back(vocab().token(id));
  return pieces;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string_view piece = vocab().token(ids[i]);
    if (i > 0 && piece.starts_with(kContinuationPrefix)) {
      text += piece.substr(kContinuationPrefix.size());
    } else {
      if (i > 0) text += ' ';
      text += piece;
    }
  }
  return text;
}

}  // namespace dp::text
