// Pretraining text: the plain and fortune file formats (exact documents), the checks on files
// (missing, binary, not UTF-8, no text), tokenizing files into packed documents, and
// make_sequences' [CLS] A [SEP] B [SEP] layout, lengths and determinism.
#include "runtime/text/corpus.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/scratch_dir.h"
#include "common/expect_error.h"
#include "runtime/core/hash.h"

namespace dp::text {
namespace {

namespace fs = std::filesystem;
using dp::testing::error_of;
using Docs = std::vector<Document>;

// [PAD] [UNK] [CLS] [SEP] [MASK], then w0 .. w{n-1}: word wk has id k + 5, so a document written
// as consecutive words has consecutive ids and the tests can see which tokens a sequence holds.
std::vector<std::string> counting_tokens(int n) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int k = 0; k < n; ++k) tokens.push_back("w" + std::to_string(k));
  return tokens;
}
constexpr int32_t kFirstWord = 5;

Tokenizer counting_tokenizer(int n = 2000) { return Tokenizer(Vocabulary(counting_tokens(n))); }

// Documents whose words are w0, w1, w2, ... in order across the whole corpus, with sentences of
// 1..max_sentence words and documents of 1..max_sentences sentences (a fixed pseudo-random pattern).
Docs counting_documents(int documents, int max_sentences, int max_sentence, int& next_word) {
  Docs docs;
  uint64_t state = 7;
  auto draw = [&](int n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 1 + static_cast<int>((state >> 33) % static_cast<uint64_t>(n));
  };
  for (int d = 0; d < documents; ++d) {
    Document doc;
    const int sentences = draw(max_sentences);
    for (int s = 0; s < sentences; ++s) {
      std::string text;
      const int words = draw(max_sentence);
      for (int w = 0; w < words; ++w) text += (w ? " w" : "w") + std::to_string(next_word++);
      doc.sentences.push_back(text);
    }
    docs.push_back(doc);
  }
  return docs;
}

class Corpus : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& bytes) { return scratch_.write(name, bytes); }

  dp::testing::ScratchDir scratch_{"dptrain_corpus"};
  const fs::path& dir_ = scratch_.path();
};

// ---- Formats -----------------------------------------------------------------------------------

TEST_F(Corpus, PlainSplitsDocumentsAtBlankLines) {
  // Google's format: a line per sentence; blank (or whitespace-only) lines end documents; runs
  // of blank lines make no empty documents; "\r\n" and a byte order mark are fine.
  const std::string path = write("plain.txt",
                                 "\xEF\xBB\xBFThe cat sat.\r\n  Hello world.  \n\n \t\n\nA dog ran.\r\n"
                                 "It ran far.\n\n\nLast one, no newline");
  EXPECT_EQ(read_documents(path, CorpusFormat::kPlain),
            (Docs{{{"The cat sat.", "Hello world."}}, {{"A dog ran.", "It ran far."}}, {{"Last one, no newline"}}}));
}

TEST_F(Corpus, FortuneSplitsDocumentsAtPercentLines) {
  // Blank lines inside a fortune are dropped, not document breaks; attributions are kept as
  // text; overstrike ("_\bu", "b\bb") is resolved; empty fortunes ("%" after "%") are dropped.
  const std::string path = write("fortunes",
                                 "A day for firm decisions!!!!!  Or is it?\n%\n"
                                 "A long-forgotten loved one will appear soon.\n\nBuy the negatives at any price.\n%\n%\n"
                                 "Never trust a man\n\t\t-- Mark Twain\n%\n"
                                 "_\bu_\bn_\bd_\be_\br lined, b\bbo\bol\bld\bd\n%\n");
  EXPECT_EQ(read_documents(path, CorpusFormat::kFortune),
            (Docs{{{"A day for firm decisions!!!!!  Or is it?"}},
                  {{"A long-forgotten loved one will appear soon.", "Buy the negatives at any price."}},
                  {{"Never trust a man", "-- Mark Twain"}},
                  {{"under lined, bold"}}}));
  // The same bytes read as plain text: blank lines split, "%" is a sentence, overstrike stays.
  const Docs plain = read_documents(path, CorpusFormat::kPlain);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].sentences.front(), "A day for firm decisions!!!!!  Or is it?");
  EXPECT_EQ(plain[0].sentences[1], "%");
}

TEST_F(Corpus, FormatNames) {
  EXPECT_EQ(parse_corpus_format("plain"), CorpusFormat::kPlain);
  EXPECT_EQ(parse_corpus_format("fortune"), CorpusFormat::kFortune);
  EXPECT_EQ(parse_corpus_format("fortunes"), std::nullopt);
  EXPECT_EQ(corpus_format_name(CorpusFormat::kFortune), "fortune");
  EXPECT_ERROR_CONTAINS(corpus_format_from_name("wiki"), "unknown corpus format 'wiki': use 'plain'");
}

TEST_F(Corpus, FortuneFilesSkipsIndexesAndLinks) {
  write("b", "x\n");
  write("a", "y\n");
  write("a.dat", std::string("\0\0\0\2", 4));
  write(".hidden", "z\n");
  fs::create_symlink(dir_ / "a", dir_ / "a.u8");
  fs::create_symlink(dir_ / "b", dir_ / "c");  // a link to text already listed
  EXPECT_EQ(fortune_files(dir_.string()), (std::vector<std::string>{(dir_ / "a").string(), (dir_ / "b").string()}));
  EXPECT_ERROR_CONTAINS(fortune_files((dir_ / "none").string()), "cannot list fortune directory");
}

TEST_F(Corpus, RealFortuneFileParses) {
  const std::string path(kFortuneDemoFile);
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent (apt-get install -y fortunes provides it)";
  const Docs docs = read_documents(path, CorpusFormat::kFortune);
  std::ifstream in(path);
  size_t separators = 0;
  for (std::string line; std::getline(in, line);) separators += line == "%";
  // Every fortune is between two "%" lines (the file ends with one): no empty fortunes there.
  EXPECT_EQ(docs.size(), separators);
  EXPECT_EQ(docs.front(), (Document{{"A day for firm decisions!!!!!  Or is it?"}}));
  for (const Document& d : docs) {
    for (const std::string& s : d.sentences) {
      ASSERT_FALSE(s.empty());
      ASSERT_EQ(s.find('\b'), std::string::npos) << s;
      ASSERT_NE(s.front(), ' ');
      ASSERT_NE(s.back(), ' ');
    }
  }
}

// ---- File errors -------------------------------------------------------------------------------

TEST_F(Corpus, MissingFileIsNamed) {
  const std::string path = (dir_ / "missing.txt").string();
  EXPECT_EQ(error_of([&] { read_documents(path, CorpusFormat::kPlain); }),
            "cannot open corpus file '" + path +
                "': No such file or directory (check the path, and that it is readable)");
  EXPECT_ERROR_CONTAINS(tokenize_files({path}, CorpusFormat::kPlain, counting_tokenizer()),
                        "cannot open corpus file '" + path + "'");
  EXPECT_ERROR_CONTAINS(read_documents(dir_.string(), CorpusFormat::kPlain), "is a directory");
}

TEST_F(Corpus, BinaryFileIsRefusedWithTheOffset) {
  const std::string path = write("model.bin", std::string("w1 w2\nw3\0\x01\x02", 11));
  EXPECT_EQ(error_of([&] { read_documents(path, CorpusFormat::kPlain); }),
            "corpus file '" + path +
                "' looks binary: a NUL byte at offset 8 (line 2); the corpus must be UTF-8 text files (for "
                "fortunes, leave out the .dat index files)");
  // Past the first eight-byte block too.
  const std::string late = write("late.bin", std::string(5000, 'a') + '\0');
  EXPECT_ERROR_CONTAINS(tokenize_files({late}, CorpusFormat::kFortune, counting_tokenizer()),
                        "' looks binary: a NUL byte at offset 5000 (line 1)");
}

TEST_F(Corpus, InvalidUtf8IsRefusedWithTheOffset) {
  const std::string path = write("latin1.txt", "w1\nw2 caf\xE9 w3\n");
  EXPECT_ERROR_CONTAINS(read_documents(path, CorpusFormat::kPlain),
                        "corpus file '" + path + "' is not UTF-8 text: byte 0xE9 at offset 9 (line 2)");
  // A surrogate, an overlong form, a sequence cut by the end of the file.
  EXPECT_ERROR_CONTAINS(read_documents(write("s.txt", "ab\xED\xA0\x80"), CorpusFormat::kPlain), "byte 0xED at offset 2");
  EXPECT_ERROR_CONTAINS(read_documents(write("o.txt", "\xC0\xAF"), CorpusFormat::kPlain), "byte 0xC0 at offset 0");
  EXPECT_ERROR_CONTAINS(read_documents(write("t.txt", "abc\xE2\x82"), CorpusFormat::kPlain), "byte 0xE2 at offset 3");
  // Valid multi-byte text passes.
  EXPECT_EQ(read_documents(write("ok.txt", "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\n"), CorpusFormat::kPlain),
            (Docs{{{"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"}}}));
}

TEST_F(Corpus, EmptyCorpusIsRefused) {
  const std::string a = write("a.txt", "\n\n   \n");
  const std::string b = write("b.txt", "%\n%\n\x01\x02\n%\n");  // control characters tokenize to nothing
  EXPECT_EQ(error_of([&] { tokenize_files({a, b}, CorpusFormat::kFortune, counting_tokenizer()); }),
            "corpus " + a + ", " + b +
                ": no text to train on (2 files read, no line gives a token: check that these are the right files and "
                "that their format, plain or fortune, is the one given)");
  EXPECT_ERROR_CONTAINS(tokenize_files({}, CorpusFormat::kPlain, counting_tokenizer()), "no files named");
  EXPECT_ERROR_CONTAINS(tokenize_documents({{{"\x01"}}}, counting_tokenizer()),
                        "corpus (in memory): no text to train on");
}

// ---- Tokenizing --------------------------------------------------------------------------------

TEST_F(Corpus, TokenizeFilesPacksDocumentsAndSentences) {
  const std::string text_a = "w1 w2\nw3\n\n\x01\n\nw4 w5 w6\n";  // the middle document is empty
  const std::string a = write("a.txt", text_a);
  const std::string b = write("b.txt", "w7\n\x01\nw8 zzz\n");                // a sentence of nothing; an [UNK]
  const TokenizedCorpus corpus = tokenize_files({a, b}, CorpusFormat::kPlain, counting_tokenizer());
  const int32_t w = kFirstWord;
  EXPECT_EQ(corpus.ids, (std::vector<int32_t>{w + 1, w + 2, w + 3, w + 4, w + 5, w + 6, w + 7, w + 8, 1}));
  EXPECT_EQ(corpus.sentence_ends, (std::vector<int64_t>{2, 3, 6, 7, 9}));
  EXPECT_EQ(corpus.document_ends, (std::vector<int64_t>{2, 3, 5}));
  ASSERT_EQ(corpus.num_documents(), 3u);
  EXPECT_EQ(corpus.document_sentences(1), (std::pair<size_t, size_t>{2, 3}));
  EXPECT_EQ(std::vector<int32_t>(corpus.sentence(4).begin(), corpus.sentence(4).end()), (std::vector<int32_t>{w + 8, 1}));
  ASSERT_EQ(corpus.files.size(), 2u);
  EXPECT_EQ(corpus.files[0].path, a);
  EXPECT_EQ(corpus.files[0].bytes, text_a.size());
  EXPECT_EQ(corpus.files[0].fnv1a64, Fnv1a().bytes(text_a.data(), text_a.size()).value());
  EXPECT_EQ(corpus.files[0].documents, 2u);
  EXPECT_EQ(corpus.files[0].sentences, 3u);
  EXPECT_EQ(corpus.files[0].tokens, 6u);
  EXPECT_EQ(corpus.files[1].documents, 1u);
  EXPECT_EQ(corpus.files[1].tokens, 3u);
}

TEST_F(Corpus, ThreadsDoNotChangeTheResult) {
  std::vector<std::string> paths;
  int next = 0;
  for (int f = 0; f < 7; ++f) {
    std::string text;
    for (const Document& d : counting_documents(5, 4, 9, next)) {
      for (const std::string& s : d.sentences) text += s + "\n";
      text += "%\n";
    }
    paths.push_back(write("f" + std::to_string(f), text));
  }
  const Tokenizer tokenizer = counting_tokenizer();
  const TokenizedCorpus one = tokenize_files(paths, CorpusFormat::kFortune, tokenizer, {.threads = 1});
  const TokenizedCorpus many = tokenize_files(paths, CorpusFormat::kFortune, tokenizer, {.threads = 4});
  EXPECT_EQ(one.ids, many.ids);
  EXPECT_EQ(one.sentence_ends, many.sentence_ends);
  EXPECT_EQ(one.document_ends, many.document_ends);
  ASSERT_EQ(many.files.size(), 7u);
  for (size_t f = 0; f < 7; ++f) EXPECT_EQ(many.files[f].path, paths[f]);
  EXPECT_EQ(one.num_documents(), 35u);
  EXPECT_EQ(one.ids.size(), static_cast<size_t>(next));
  // The first error in file order whatever the threads.
  paths.insert(paths.begin() + 2, (dir_ / "gone1").string());
  paths.push_back((dir_ / "gone2").string());
  EXPECT_ERROR_CONTAINS(tokenize_files(paths, CorpusFormat::kFortune, tokenizer, {.threads = 4}), "gone1");
}

// ---- Sequences ---------------------------------------------------------------------------------

// Checks the layout of every sequence: [CLS] A [SEP] (B [SEP]), length within the limit, A and B
// each a run of consecutive words with B after A (the counting corpus), B's start right.
void expect_bert_layout(const Sequences& seqs, int max_seq_length) {
  ASSERT_EQ(seqs.offsets.size(), seqs.size() + 1);
  ASSERT_EQ(static_cast<size_t>(seqs.offsets.back()), seqs.ids.size());
  const int32_t cls = 2, sep = 3;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::span<const int32_t> t = seqs.tokens(i);
    const size_t n = t.size(), b = static_cast<size_t>(seqs.segment_b_start(i));
    ASSERT_LE(n, static_cast<size_t>(max_seq_length)) << "sequence " << i;
    ASSERT_GE(n, 3u);
    ASSERT_EQ(t[0], cls) << "sequence " << i;
    ASSERT_EQ(t[n - 1], sep) << "sequence " << i;
    ASSERT_GE(b, 3u) << "A has a token";
    ASSERT_LE(b, n);
    ASSERT_EQ(t[b - 1], sep) << "sequence " << i << ": [SEP] ends A";
    if (b < n) {
      ASSERT_GE(n - b, 2u) << "B has a token and its [SEP]";
    }
    for (size_t k = 1; k < n - 1; ++k) {
      if (k == b - 1) continue;
      ASSERT_GE(t[k], kFirstWord) << "sequence " << i << " position " << k << ": no special token inside A or B";
    }
    for (size_t k = 2; k < b - 1; ++k) ASSERT_EQ(t[k], t[k - 1] + 1) << "A is consecutive words";
    for (size_t k = b + 1; k < n - 1; ++k) ASSERT_EQ(t[k], t[k - 1] + 1) << "B is consecutive words";
    if (b < n) {
      ASSERT_GT(t[b], t[b - 2]) << "B follows A";
    }
  }
}

TEST_F(Corpus, MakeSequencesHasBertLayout) {
  int next = 0;
  const Docs docs = counting_documents(120, 12, 14, next);
  const Tokenizer tokenizer = counting_tokenizer(next);
  const TokenizedCorpus corpus = tokenize_documents(docs, tokenizer);
  for (const int max_len : {5, 8, 16, 32, 128}) {
    SCOPED_TRACE(max_len);
    const Sequences seqs = make_sequences(corpus, tokenizer.vocab(), {.max_seq_length = max_len, .seed = 3});
    ASSERT_GT(seqs.size(), 0u);
    expect_bert_layout(seqs, max_len);
    size_t with_b = 0, full = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      with_b += static_cast<size_t>(seqs.segment_b_start(i)) < seqs.length(i);
      full += seqs.length(i) >= static_cast<size_t>(max_len) - 1;
    }
    if (max_len >= 16) {
      EXPECT_GT(with_b, seqs.size() / 4) << "multi-sentence chunks have a B";
    }
    if (max_len <= 32) {
      EXPECT_GT(full, seqs.size() / 3) << "chunks fill the target length";
    }
  }
}

TEST_F(Corpus, MakeSequencesWithoutShortSequencesUsesEveryTokenOnce) {
  // Sentences of one word never overshoot the target, so nothing is truncated: every word is in
  // exactly one sequence, in order.
  int next = 0;
  const Docs docs = counting_documents(50, 40, 1, next);
  const Tokenizer tokenizer = counting_tokenizer(next);
  const Sequences seqs = make_sequences(tokenize_documents(docs, tokenizer), tokenizer.vocab(),
                                        {.max_seq_length = 16, .short_seq_prob = 0.0});
  expect_bert_layout(seqs, 16);
  std::vector<int32_t> words;
  for (const int32_t id : seqs.ids) {
    if (id >= kFirstWord) words.push_back(id - kFirstWord);
  }
  ASSERT_EQ(words.size(), static_cast<size_t>(next));
  for (int k = 0; k < next; ++k) ASSERT_EQ(words[static_cast<size_t>(k)], k);
  // Each chunk reaches the target (13 tokens) unless its document ended.
  for (size_t i = 0; i < seqs.size(); ++i) ASSERT_LE(seqs.length(i), 16u);
}

TEST_F(Corpus, MakeSequencesSingleSentenceHasNoSegmentB) {
  // One sentence of 40 words: chunks of one sentence, [CLS] A [SEP], A cut to max_seq_length - 2
  // from a random end.
  std::string text;
  for (int k = 0; k < 40; ++k) text += " w" + std::to_string(k);
  const Tokenizer tokenizer = counting_tokenizer();
  const Sequences seqs =
      make_sequences(tokenize_documents({{{text}}}, tokenizer), tokenizer.vocab(), {.max_seq_length = 10, .short_seq_prob = 0});
  ASSERT_EQ(seqs.size(), 1u);
  EXPECT_EQ(seqs.length(0), 10u);
  EXPECT_EQ(seqs.segment_b_start(0), 10);
  expect_bert_layout(seqs, 10);
  // Two sentences: A is the first, B the second, truncated together to 7 + 3.
  const Sequences pair = make_sequences(tokenize_documents({{{"w0 w1", "w2 w3 w4 w5 w6 w7 w8 w9 w10"}}}, tokenizer),
                                        tokenizer.vocab(), {.max_seq_length = 10, .short_seq_prob = 0});
  ASSERT_EQ(pair.size(), 1u);
  expect_bert_layout(pair, 10);
  EXPECT_EQ(pair.length(0), 10u);
  EXPECT_EQ(pair.segment_b_start(0), 4);  // [CLS] w0 w1 [SEP] | B (the longer side) lost 4 tokens
  EXPECT_EQ(pair.tokens(0)[1], kFirstWord);
}

TEST_F(Corpus, MakeSequencesIsDeterministicForASeed) {
  int next = 0;
  const Docs docs = counting_documents(80, 10, 12, next);
  const Tokenizer tokenizer = counting_tokenizer(next);
  const TokenizedCorpus corpus = tokenize_documents(docs, tokenizer);
  const SequenceOptions options{.max_seq_length = 24, .seed = 42};
  const Sequences a = make_sequences(corpus, tokenizer.vocab(), options);
  const Sequences b = make_sequences(corpus, tokenizer.vocab(), options);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.segment_b_starts, b.segment_b_starts);
  SequenceOptions other = options;
  other.seed = 43;
  const Sequences c = make_sequences(corpus, tokenizer.vocab(), other);
  EXPECT_TRUE(a.ids != c.ids || a.segment_b_starts != c.segment_b_starts);
  // Pinned: the numbers are the library's own (SplitMix64), the same on every machine.
  EXPECT_EQ(SplitMix64(SplitMix64::key(1, 2, 3)).next(), SplitMix64(SplitMix64::key(1, 2, 3)).next());
  EXPECT_NE(SplitMix64::key(1, 2, 3), SplitMix64::key(1, 3, 2));
  EXPECT_EQ(SplitMix64(0).next(), 0xE220A8397B1DCDAFull);  // SplitMix64's published first output for seed 0
  // dupe_factor passes cut the corpus again, differently.
  SequenceOptions twice = options;
  twice.dupe_factor = 2;
  const Sequences d = make_sequences(corpus, tokenizer.vocab(), twice);
  EXPECT_GT(d.size(), a.size());
  EXPECT_TRUE(std::equal(a.ids.begin(), a.ids.end(), d.ids.begin()));
  expect_bert_layout(d, 24);
}

TEST_F(Corpus, ShortSequencesAtTheirRate) {
  // With short_seq_prob 1 every document draws a target in [2, max - 3]; with 0 none does.
  int next = 0;
  const Docs docs = counting_documents(300, 60, 4, next);
  const Tokenizer tokenizer = counting_tokenizer(next);
  const TokenizedCorpus corpus = tokenize_documents(docs, tokenizer);
  auto mean_length = [&](double p) {
    const Sequences s = make_sequences(corpus, tokenizer.vocab(), {.max_seq_length = 64, .short_seq_prob = p});
    return static_cast<double>(s.ids.size()) / static_cast<double>(s.size());
  };
  const double short_mean = mean_length(1.0), long_mean = mean_length(0.0);
  EXPECT_LT(short_mean, 0.8 * long_mean) << short_mean << " vs " << long_mean;
}

TEST_F(Corpus, MakeSequencesChecksOptions) {
  const Tokenizer tokenizer = counting_tokenizer();
  const TokenizedCorpus corpus = tokenize_documents({{{"w1 w2"}}}, tokenizer);
  EXPECT_ERROR_CONTAINS(make_sequences(corpus, tokenizer.vocab(), {.max_seq_length = 4}),
                        "max_seq_length must be at least 5");
  EXPECT_ERROR_CONTAINS(make_sequences(corpus, tokenizer.vocab(), {.short_seq_prob = 1.5}), "short_seq_prob");
  EXPECT_ERROR_CONTAINS(make_sequences(corpus, tokenizer.vocab(), {.dupe_factor = 0}), "dupe_factor");
  EXPECT_ERROR_CONTAINS(make_sequences(TokenizedCorpus{}, tokenizer.vocab(), {}), "no document");
  const Vocabulary no_cls({"[UNK]", "[SEP]", "w1", "w2"});
  EXPECT_ERROR_CONTAINS(make_sequences(corpus, no_cls, {}), "[CLS]");
}

TEST_F(Corpus, SplitMix64Ranges) {
  SplitMix64 rng(5);
  std::vector<int> counts(7);
  for (int i = 0; i < 70000; ++i) {
    const int64_t v = rng.between(3, 9);
    ASSERT_GE(v, 3);
    ASSERT_LE(v, 9);
    ++counts[static_cast<size_t>(v - 3)];
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
  for (const int c : counts) EXPECT_NEAR(c, 10000, 500);
}

}  // namespace
}  // namespace dp::text
