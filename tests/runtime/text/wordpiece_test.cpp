// BERT WordPiece tokenization: the vocabulary loader and its errors, the basic tokenizer's
// cleaning / splitting / lower-casing / accent stripping, WordPiece segmentation, encode/decode
// and concurrent use. Expected pieces are worked out by hand from Google BERT's tokenization.py
// (the comments say how where it is not obvious).
#include "runtime/text/wordpiece.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/scratch_dir.h"
#include "common/expect_error.h"

namespace dp::text {
namespace {

namespace fs = std::filesystem;
using dp::testing::error_of;
using namespace std::string_literals;
using Pieces = std::vector<std::string>;

// A small uncased vocabulary that spells the words the tests use. There is no "unaff" or
// "unaffable", so "unaffable" must come out as un ##aff ##able.
std::vector<std::string> test_tokens() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", ",", "!", ".", "'", "don", "t",
          "cafe", "deja", "un", "##aff", "##able", "the", "cat", "##s", "sat", "on", "mat", "hi", "quoted",
          "«", "»", "—", "中", "国", "人", "a", "##a"};
}

Tokenizer uncased_tokenizer(TokenizerOptions options = {}) { return Tokenizer(Vocabulary(test_tokens()), options); }

class VocabularyFile : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) { return scratch_.write(name, bytes); }

  dp::testing::ScratchDir scratch_{"dptrain_wordpiece"};
  const fs::path& dir_ = scratch_.path();
};

// ---- Vocabulary -------------------------------------------------------------------------------

TEST(Vocabulary, LooksUpTokensAndIdsBothWays) {
  const Vocabulary vocab(test_tokens());
  EXPECT_EQ(vocab.size(), test_tokens().size());
  EXPECT_EQ(vocab.id("hello"), 5);
  EXPECT_EQ(vocab.token(5), "hello");
  EXPECT_EQ(vocab.find("##aff"), 16);
  EXPECT_EQ(vocab.find_continuation("aff"), 16);  // "##" + "aff"
  EXPECT_EQ(vocab.find_continuation("hello"), std::nullopt);
  EXPECT_EQ(vocab.find("zebra"), std::nullopt);
  EXPECT_TRUE(vocab.contains("中"));
  EXPECT_EQ(vocab.source(), "(in memory)");
  EXPECT_EQ(vocab.max_token_bytes(), 6u);         // "[MASK]", "quoted"
  EXPECT_EQ(vocab.max_continuation_bytes(), 4u);  // "##able"
  EXPECT_ERROR_CONTAINS(vocab.id("zebra"), "vocab (in memory): has no token \"zebra\"");
  EXPECT_ERROR_CONTAINS(vocab.token(34), "id 34 is out of range (the vocabulary has 34 tokens, ids 0 to 33)");
  EXPECT_ERROR_CONTAINS(vocab.token(-1), "id -1 is out of range");
}

TEST(Vocabulary, SpecialTokenIds) {
  const Vocabulary vocab(test_tokens());
  EXPECT_EQ(vocab.pad_id(), 0);
  EXPECT_EQ(vocab.unk_id(), 1);
  EXPECT_EQ(vocab.cls_id(), 2);
  EXPECT_EQ(vocab.sep_id(), 3);
  EXPECT_EQ(vocab.mask_id(), 4);
  const Vocabulary bare({"hello", "world"});
  EXPECT_EQ(error_of([&] { bare.pad_id(); }),
            "vocab (in memory): has no [PAD] token (needed for padding sequences to a common length)");
  EXPECT_ERROR_CONTAINS(bare.unk_id(), "has no [UNK] token");
  EXPECT_ERROR_CONTAINS(bare.cls_id(), "has no [CLS] token");
  EXPECT_ERROR_CONTAINS(bare.sep_id(), "has no [SEP] token");
}

TEST(Vocabulary, InMemoryProblemsNameTheIndex) {
  EXPECT_ERROR_CONTAINS(Vocabulary({"a", "b", "a"}),
                        "vocab (in memory): token \"a\" appears twice, on index 0 and on index 2");
  EXPECT_ERROR_CONTAINS(Vocabulary({"a", ""}), "vocab (in memory): index 1 is empty");
  EXPECT_ERROR_CONTAINS(Vocabulary(std::vector<std::string>{}), "vocab (in memory): is empty");
  EXPECT_ERROR_CONTAINS(Vocabulary({"a", "b\xC3"}),
                        "vocab (in memory): index 1 is not valid UTF-8: byte 0xC3 at offset 1");
}

TEST(Vocabulary, FingerprintIsStableAndDependsOnTokensAndOrder) {
  const Vocabulary vocab({"[PAD]", "[UNK]", "hello"});
  // FNV-1a 64 over each token's bytes followed by 0xFF and seven zero bytes (dp::Fnv1a::text's
  // terminator, the 64-bit word 0xFF little-endian), computed independently in Python; pinned so
  // that a change of the digest (which would orphan every data shard recorded with it) fails here.
  EXPECT_EQ(vocab.fingerprint(), 0xecb194177256c159ull);
  EXPECT_EQ(Vocabulary({"[PAD]", "[UNK]", "hello"}).fingerprint(), vocab.fingerprint());
  EXPECT_NE(Vocabulary({"[UNK]", "[PAD]", "hello"}).fingerprint(), vocab.fingerprint());
  EXPECT_NE(Vocabulary({"[PAD]", "[UNK]", "hell", "o"}).fingerprint(), vocab.fingerprint());
  EXPECT_NE(Vocabulary({"[PAD]", "[UNK]", "hello", "x"}).fingerprint(), vocab.fingerprint());
}

TEST_F(VocabularyFile, LoadsVocabTxt) {
  // CRLF line ends, a byte order mark, no newline after the last token: ids are line indexes.
  const std::string path = write("vocab.txt", "\xEF\xBB\xBF[PAD]\r\n[UNK]\r\nhello\r\n##lo\r\ncafé");
  const Vocabulary vocab = Vocabulary::load(path);
  EXPECT_EQ(vocab.size(), 5u);
  EXPECT_EQ(vocab.source(), path);
  EXPECT_EQ(vocab.token(0), "[PAD]");
  EXPECT_EQ(vocab.id("hello"), 2);
  EXPECT_EQ(vocab.find_continuation("lo"), 3);
  EXPECT_EQ(vocab.id("café"), 4);
  // The same tokens from memory are the same vocabulary.
  EXPECT_EQ(vocab.fingerprint(), Vocabulary({"[PAD]", "[UNK]", "hello", "##lo", "café"}).fingerprint());
  EXPECT_EQ(Vocabulary::load(write("lf.txt", "[PAD]\n[UNK]\nhello\n##lo\ncafé\n")).fingerprint(), vocab.fingerprint());
}

TEST_F(VocabularyFile, MissingFileIsNamedWithTheReason) {
  const std::string path = (dir_ / "nope" / "vocab.txt").string();
  EXPECT_EQ(error_of([&] { Vocabulary::load(path); }), "vocab " + path + ": cannot open: No such file or directory");
  EXPECT_ERROR_CONTAINS(Vocabulary::load(dir_.string()), ": cannot read: Is a directory");
}

TEST_F(VocabularyFile, EmptyFileIsAnError) {
  const std::string path = write("vocab.txt", "");
  EXPECT_ERROR_CONTAINS(Vocabulary::load(path), "vocab " + path + ": is empty");
}

TEST_F(VocabularyFile, EmptyLineIsAnError) {
  const std::string path = write("vocab.txt", "[PAD]\n[UNK]\n\nhello\n");
  EXPECT_ERROR_CONTAINS(Vocabulary::load(path), "vocab " + path + ": line 3 is empty");
  // A blank line at the end would still give "" an id (vocab_size one too many).
  EXPECT_ERROR_CONTAINS(Vocabulary::load(write("trailing.txt", "[PAD]\n[UNK]\n\n")), "line 3 is empty");
  EXPECT_ERROR_CONTAINS(Vocabulary::load(write("crlf.txt", "[PAD]\r\n\r\n")), "line 2 is empty");
}

TEST_F(VocabularyFile, DuplicateTokenNamesBothLines) {
  const std::string path = write("vocab.txt", "[PAD]\n[UNK]\nhello\nworld\n##s\nhello\n");
  EXPECT_EQ(error_of([&] { Vocabulary::load(path); }),
            "vocab " + path +
                ": token \"hello\" appears twice, on line 3 and on line 6 (each token must have exactly one id)");
}

TEST_F(VocabularyFile, InvalidUtf8NamesTheLine) {
  const std::string path = write("vocab.txt", "[PAD]\nhello\nwor\xFFld\n");
  EXPECT_ERROR_CONTAINS(Vocabulary::load(path), "vocab " + path + ": line 3 is not valid UTF-8: byte 0xFF at offset 3");
}

TEST_F(VocabularyFile, MissingMaskNamesTheFileAndWhatItIsFor) {
  const std::string path = write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  const Vocabulary vocab = Vocabulary::load(path);
  EXPECT_EQ(vocab.cls_id(), 2);
  EXPECT_EQ(error_of([&] { vocab.mask_id(); }),
            "vocab " + path + ": has no [MASK] token (needed for masked-LM masking)");
}

// ---- BasicTokenizer ---------------------------------------------------------------------------

struct BasicCase {
  std::string text;
  Pieces expected;
};

TEST(BasicTokenizer, SplitsCleansAndLowerCasesLikeBert) {
  const std::vector<BasicCase> cases = {
      {"Hello, world!", {"hello", ",", "world", "!"}},
      {"don't", {"don", "'", "t"}},
      {"don\u2019t", {"don", "\u2019", "t"}},  // U+2019 right single quote is Pf
      {"U.S.A.", {"u", ".", "s", ".", "a", "."}},
      {"hello...world", {"hello", ".", ".", ".", "world"}},
      // $ + = are symbols in Unicode (Sc, Sm) but in BERT's ASCII punctuation ranges ...
      {"$5+3=8", {"$", "5", "+", "3", "=", "8"}},
      // ... while a non-ASCII symbol is not punctuation: € (Sc) stays with the digit.
      {"\u20AC5", {"\u20AC5"}},
      {"\u00ABquoted\u00BB", {"\u00AB", "quoted", "\u00BB"}},  // « Pi, » Pf
      {"hello\u2014world", {"hello", "\u2014", "world"}},        // em dash, Pd
      {"Caf\u00E9 D\u00E9j\u00E0", {"cafe", "deja"}},
      {"Cafe\u0301", {"cafe"}},                          // already decomposed: the mark (Mn) goes
      {"\u0301", {}},                                    // a word of marks only leaves nothing
      {"\u00C5NGSTR\u00D6M", {"angstrom"}},
      {"\u0391\u0398\u0397\u039D\u0391", {"\u03B1\u03B8\u03B7\u03BD\u03B1"}},  // ΑΘΗΝΑ -> αθηνα
      {"\u1F08\u03B8\u1FC6\u03BD\u03B1\u03B9", {"\u03B1\u03B8\u03B7\u03BD\u03B1\u03B9"}},  // Ἀθῆναι -> αθηναι
      {"\u4E2D\u56FD\u4EBA", {"\u4E2D", "\u56FD", "\u4EBA"}},  // 中国人: one token per ideograph
      {"ab\u4E2Dcd", {"ab", "\u4E2D", "cd"}},
      {"\u3053\u3093\u306B\u3061\u306F", {"\u3053\u3093\u306B\u3061\u306F"}},  // hiragana is not CJK here
      {"hi \U0001F600", {"hi", "\U0001F600"}},  // emoji: So, a word of its own only by the space
      // Dropped: NUL, a C0 control, U+200B zero-width space (Cf), U+FFFD. The word closes up.
      {"hel\0lo\x01 wo\u200Brld\uFFFD!"s, {"hello", "world", "!"}},
      // \t \n \r are whitespace; so are no-break space and ideographic space (Zs).
      {"hello\tworld\nhi\r\nthe\u00A0cat\u3000sat", {"hello", "world", "hi", "the", "cat", "sat"}},
      // Vertical tab and form feed are Cc but not BERT whitespace: dropped, joining the words.
      {"a\x0B" "b\x0C" "c", {"abc"}},
      // U+2028 line separator (Zl): BERT's str.split() splits on it.
      {"a\u2028b", {"a", "b"}},
      {"[CLS] hi [SEP]", {"[CLS]", "hi", "[SEP]"}},
      // never_split holds whole whitespace-delimited tokens only: glued to a word, or in another
      // case, [CLS] is ordinary text and its brackets are punctuation.
      {"[CLS]hi", {"[", "cls", "]", "hi"}},
      {"[cls]", {"[", "cls", "]"}},
      {"", {}},
      {"  \t\n\r\u3000 ", {}},
  };
  const BasicTokenizer basic;
  for (const BasicCase& c : cases) EXPECT_EQ(basic.tokenize(c.text), c.expected) << "text: \"" << c.text << "\"";
}

TEST(BasicTokenizer, AccentsAndCaseFollowTheOptions) {
  const std::string text = "Caf\u00E9 D\u00E9j\u00E0!";
  // Cased: strip_accents defaults to lower_case, so both are off.
  EXPECT_EQ(BasicTokenizer({.lower_case = false}).tokenize(text), (Pieces{"Caf\u00E9", "D\u00E9j\u00E0", "!"}));
  EXPECT_EQ(BasicTokenizer({.lower_case = false, .strip_accents = true}).tokenize(text), (Pieces{"Cafe", "Deja", "!"}));
  EXPECT_EQ(BasicTokenizer({.lower_case = true, .strip_accents = false}).tokenize(text),
            (Pieces{"caf\u00E9", "d\u00E9j\u00E0", "!"}));
  const BasicTokenizer cased({.lower_case = false});
  EXPECT_FALSE(cased.lower_case());
  EXPECT_FALSE(cased.strip_accents());
}

TEST(BasicTokenizer, ChineseCharsStayTogetherWhenAsked) {
  const BasicTokenizer basic({.tokenize_chinese_chars = false});
  EXPECT_EQ(basic.tokenize("\u4E2D\u56FD\u4EBA ab\u4E2Dcd"), (Pieces{"\u4E2D\u56FD\u4EBA", "ab\u4E2Dcd"}));
}

TEST(BasicTokenizer, NeverSplitIsConfigurable) {
  const BasicTokenizer none({.never_split = {}});
  EXPECT_EQ(none.tokenize("[CLS] hi"), (Pieces{"[", "cls", "]", "hi"}));
  const BasicTokenizer custom({.never_split = {"<Foo-Bar>", "\u00ABX\u00BB"}});
  EXPECT_EQ(custom.tokenize("<Foo-Bar> Foo-Bar \u00ABX\u00BB \u00ABY\u00BB"),
            (Pieces{"<Foo-Bar>", "foo", "-", "bar", "\u00ABX\u00BB", "\u00AB", "y", "\u00BB"}));
  EXPECT_TRUE(custom.is_never_split("<Foo-Bar>"));
  EXPECT_FALSE(custom.is_never_split("<foo-bar>"));
  EXPECT_FALSE(custom.is_never_split(""));
}

TEST(BasicTokenizer, InvalidUtf8IsAnErrorWithTheOffset) {
  const BasicTokenizer basic;
  EXPECT_EQ(error_of([&] { basic.tokenize("abc\xFF"); }),
            "text is not valid UTF-8: byte 0xFF at offset 3 does not start a valid sequence (truncated, overlong, a "
            "surrogate or beyond U+10FFFF)");
  EXPECT_ERROR_CONTAINS(basic.tokenize("caf\xC3"), "byte 0xC3 at offset 3");          // truncated é
  EXPECT_ERROR_CONTAINS(basic.tokenize("a\xC0\xAF"), "byte 0xC0 at offset 1");        // overlong '/'
  EXPECT_ERROR_CONTAINS(basic.tokenize("\xED\xA0\x80"), "byte 0xED at offset 0");     // surrogate U+D800
  EXPECT_ERROR_CONTAINS(basic.tokenize("x\xF4\x90\x80\x80"), "byte 0xF4 at offset 1");  // U+110000
  EXPECT_ERROR_CONTAINS(basic.tokenize("ab\x80"), "byte 0x80 at offset 2");           // stray continuation
}

TEST(BasicTokenizer, SplitReusesItsBuffer) {
  const BasicTokenizer basic;
  BasicTokens tokens;
  basic.split("Hello, world!", tokens);
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0], "hello");
  EXPECT_EQ(tokens[3], "!");
  basic.split("again", tokens);  // cleared first
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0], "again");
  basic.split("", tokens);
  EXPECT_TRUE(tokens.empty());
}

// ---- WordPiece --------------------------------------------------------------------------------

struct TokenizeCase {
  std::string text;
  Pieces expected;
};

TEST(WordPiece, TokenizesLikeBert) {
  const std::vector<TokenizeCase> cases = {
      {"Hello, world!", {"hello", ",", "world", "!"}},
      {"don't", {"don", "'", "t"}},
      {"Caf\u00E9 D\u00E9j\u00E0", {"cafe", "deja"}},
      // Longest prefix "un" (no "unaff..." in the vocabulary), then the longest continuations.
      {"unaffable", {"un", "##aff", "##able"}},
      {"cats", {"cat", "##s"}},
      // un ##aff match, but nothing spells "##x": BERT replaces the whole word, not only the rest.
      {"unaffx", {"[UNK]"}},
      {"zebra", {"[UNK]"}},
      {"the zebra sat", {"the", "[UNK]", "sat"}},
      // "aff" is not a word start in this vocabulary (only "##aff"), so the word cannot start.
      {"affable", {"[UNK]"}},
      {"\u4E2D\u56FD\u4EBA", {"\u4E2D", "\u56FD", "\u4EBA"}},
      {"hi\u4E2D\u56FD", {"hi", "\u4E2D", "\u56FD"}},
      {"\u00ABquoted\u00BB", {"\u00AB", "quoted", "\u00BB"}},
      {"hello\u2014world", {"hello", "\u2014", "world"}},
      {"hel\0lo\uFFFD wor\x07ld"s, {"hello", "world"}},
      {"hello\tworld\n", {"hello", "world"}},
      {"[CLS] hi [SEP]", {"[CLS]", "hi", "[SEP]"}},
      {"[CLS] [MASK] [PAD]", {"[CLS]", "[MASK]", "[PAD]"}},
      {"", {}},
      {" \t\n ", {}},
      // 100 "a" are 100 characters, the default limit: a ##a ##a ...; 101 are one [UNK].
      {std::string(100, 'a'), [] {
         Pieces p(100, "##a");
         p[0] = "a";
         return p;
       }()},
      {std::string(101, 'a'), {"[UNK]"}},
  };
  const Tokenizer tokenizer = uncased_tokenizer();
  for (const TokenizeCase& c : cases) {
    EXPECT_EQ(tokenizer.tokenize(c.text), c.expected) << "text: \"" << c.text << "\"";
  }
}

TEST(WordPiece, EncodeGivesTheVocabularyIds) {
  const Tokenizer tokenizer = uncased_tokenizer();
  const Vocabulary& vocab = tokenizer.vocab();
  EXPECT_EQ(tokenizer.encode("Unaffable cats!"),
            (std::vector<int32_t>{vocab.id("un"), vocab.id("##aff"), vocab.id("##able"), vocab.id("cat"),
                                  vocab.id("##s"), vocab.id("!")}));
  // Appending form: ids already in the buffer stay.
  std::vector<int32_t> ids = {vocab.cls_id()};
  tokenizer.encode("hi", ids);
  tokenizer.encode("", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{vocab.cls_id(), vocab.id("hi")}));
}

TEST(WordPiece, MaxInputCharsCountsCodePointsNotBytes) {
  // "é" is 2 bytes; 60 of them are 120 bytes but 60 characters, under the default 100.
  auto vocab = std::make_shared<const Vocabulary>(std::vector<std::string>{"[UNK]", "\u00E9", "##\u00E9"});
  const WordpieceTokenizer wordpiece(vocab);
  std::string sixty, hundred_one;
  for (int i = 0; i < 60; ++i) sixty += "\u00E9";
  for (int i = 0; i < 101; ++i) hundred_one += "\u00E9";
  Pieces expected(60, "##\u00E9");
  expected[0] = "\u00E9";
  EXPECT_EQ(wordpiece.tokenize(sixty), expected);
  EXPECT_EQ(wordpiece.tokenize(hundred_one), (Pieces{"[UNK]"}));
  EXPECT_TRUE(wordpiece.tokenize("").empty());
  // A lower limit, through the Tokenizer's options.
  const Tokenizer short_words = uncased_tokenizer({.max_input_chars_per_word = 5});
  EXPECT_EQ(short_words.tokenize("hello cats worlds"), (Pieces{"hello", "cat", "##s", "[UNK]"}));
  EXPECT_ERROR_CONTAINS(uncased_tokenizer({.max_input_chars_per_word = 0}),
                        "max_input_chars_per_word must be positive, got 0");
}

TEST(WordPiece, CasedVocabularyKeepsCaseAndAccents) {
  const Tokenizer cased(Vocabulary({"[UNK]", "[CLS]", "Caf\u00E9", "Paris", "cafe", "##s"}),
                        {.basic = {.lower_case = false}});
  EXPECT_EQ(cased.tokenize("Caf\u00E9s Paris cafe Cafe"), (Pieces{"Caf\u00E9", "##s", "Paris", "cafe", "[UNK]"}));
}

TEST(WordPiece, NeverSplitTokenMissingFromTheVocabularyIsUnk) {
  // BertTokenizer looks a never-split token up whole: [UNK], not "[" "foo" "]".
  const Tokenizer tokenizer(Vocabulary(test_tokens()), {.basic = {.never_split = {"[FOO]", "[CLS]"}}});
  EXPECT_EQ(tokenizer.tokenize("[FOO] hi [CLS]"), (Pieces{"[UNK]", "hi", "[CLS]"}));
}

TEST(WordPiece, VocabularyWithoutUnkIsRefused) {
  EXPECT_ERROR_CONTAINS(Tokenizer(Vocabulary({"hello", "world"})),
                        "vocab (in memory): has no [UNK] token (needed for words the vocabulary cannot spell)");
}

TEST(WordPiece, InvalidUtf8IsAnError) {
  const Tokenizer tokenizer = uncased_tokenizer();
  EXPECT_ERROR_CONTAINS(tokenizer.encode("hello \xE4\xB8"), "text is not valid UTF-8: byte 0xE4 at offset 6");
}

TEST(WordPiece, DecodeRoundTrip) {
  const Tokenizer tokenizer = uncased_tokenizer();
  const std::vector<int32_t> ids = tokenizer.encode("The cats sat on the mat.");
  EXPECT_EQ(tokenizer.tokenize("The cats sat on the mat."),
            (Pieces{"the", "cat", "##s", "sat", "on", "the", "mat", "."}));
  // Lower-cased, "##s" glued back on, punctuation spaced off: good enough for logs.
  EXPECT_EQ(tokenizer.decode(ids), "the cats sat on the mat .");
  EXPECT_EQ(tokenizer.encode(tokenizer.decode(ids)), ids);
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("unaffable")), "unaffable");
  EXPECT_EQ(tokenizer.decode({}), "");
  // A continuation piece first has nothing to glue to and keeps its "##" (as BertTokenizer).
  const Vocabulary& vocab = tokenizer.vocab();
  EXPECT_EQ(tokenizer.decode(std::vector<int32_t>{vocab.id("##s"), vocab.id("cat"), vocab.id("##s")}), "##s cats");
  EXPECT_ERROR_CONTAINS(tokenizer.decode(std::vector<int32_t>{5, 99}), "id 99 is out of range");
}

TEST(WordPiece, ConcurrentEncodeGivesIdenticalIds) {
  const Tokenizer tokenizer = uncased_tokenizer();
  const std::string text =
      "Hello, world! The cats sat on the mat. Unaffable caf\u00E9 \u00ABquoted\u00BB \u4E2D\u56FD\u4EBA don't zebra "
      "[CLS] hi [SEP]\thello\u2014world";
  const std::vector<int32_t> expected = tokenizer.encode(text);
  ASSERT_GT(expected.size(), 20u);
  constexpr int kThreads = 4, kRepeats = 2000;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRepeats; ++i) {
        if (tokenizer.encode(text) != expected) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[static_cast<size_t>(t)], 0) << "thread " << t;
}

}  // namespace
}  // namespace dp::text
