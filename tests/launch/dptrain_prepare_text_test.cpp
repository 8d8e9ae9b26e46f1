// End-to-end: `dptrain prepare-text` writes token shards a run can open, from the built-in corpus
// or given files, and refuses bad input with one clear message and exit status 1.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/run_program.h"
#include "common/scratch_dir.h"
#include "runtime/text/corpus.h"
#include "runtime/text/text_shards.h"
#include "runtime/text/wordpiece.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

dp::testing::ProgramResult prepare(const std::string& args) {
  return dp::testing::run_program(dp::testing::dptrain_binary() + " prepare-text " + args);
}

class PrepareText : public ::testing::Test {
 protected:
  dp::testing::ScratchDir scratch_{"dptrain_prepare_text"};
  std::string out(const std::string& name = "shards") const { return (scratch_.path() / name).string(); }
};

TEST_F(PrepareText, GivenFilesAndVocabMakeShardsThatOpen) {
  const std::string vocab = scratch_.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\n.\n"
                                                        "a\ndog\nran\n");
  const std::string text = scratch_.write("corpus.txt", "The cat sat on the mat.\nA dog ran.\n\nThe dog sat.\nA cat ran.\n");
  const auto r = prepare(text + " --vocab " + vocab + " --out " + out() + " --max-seq-length 16 --short-seq-prob 0 --eval-fraction 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("1 file (0.00 MB, plain format): 2 documents, 4 sentences, 19 tokens (0.000 % [UNK])"));
  EXPECT_THAT(r.output, HasSubstr("vocabulary: 14 tokens, " + vocab));
  const auto loaded = dp::text::Vocabulary::load(vocab);
  const dp::text::TextDataset data = dp::text::TextDataset::open(out(), loaded);
  ASSERT_EQ(data.size(), 2u);  // one sequence per document: each fits in 16
  // [CLS] A [SEP] B [SEP] over each document's two sentences: 7 + 4 and 4 + 4 tokens.
  EXPECT_EQ(data.length(0), 11u + 3u);
  EXPECT_EQ(data.length(1), 8u + 3u);
  EXPECT_FALSE(fs::exists(fs::path(out()) / "vocab.txt")) << "a given vocab is not copied";
  EXPECT_FALSE(fs::exists(fs::path(out()) / "eval")) << "--eval-fraction 0: no evaluation split";
}

TEST_F(PrepareText, HeldOutDocumentsGoToTheEvaluationShards) {
  const std::string vocab = scratch_.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\n.\n"
                                                        "a\ndog\nran\n");
  std::string text;  // 20 documents of two sentences: one sequence each
  for (int d = 0; d < 20; ++d) text += d % 2 ? "The cat sat.\nA dog ran.\n\n" : "A dog sat on the mat.\nThe cat ran.\n\n";
  const std::string corpus = scratch_.write("corpus.txt", text);
  const auto r = prepare(corpus + " --vocab " + vocab + " --out " + out() + " --max-seq-length 16 --short-seq-prob 0"
                         " --eval-fraction 0.1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("evaluation: 2 held-out documents, 2 sequences under " + out() + "/eval"));
  const auto loaded = dp::text::Vocabulary::load(vocab);
  EXPECT_EQ(dp::text::TextDataset::open(out(), loaded).size(), 18u) << "the evaluation shards are not training data";
  EXPECT_EQ(dp::text::TextDataset::open(out() + "/eval", loaded).size(), 2u);
  // Too few documents to hold any out: a clear error, nothing written.
  const std::string one = scratch_.write("one.txt", "The cat sat.\n");
  const auto few = prepare(one + " --vocab " + vocab + " --out " + out("few"));
  EXPECT_EQ(few.exit_code, 1) << few.output;
  EXPECT_THAT(few.output, HasSubstr("the corpus has 1 document: too few to hold out 1 for evaluation"));
  EXPECT_FALSE(fs::exists(out("few")));
}

TEST_F(PrepareText, TheBuiltInCorpusNeedsNoArguments) {
  if (!fs::is_directory(std::string(dp::text::kFortuneDirectory)))
    GTEST_SKIP() << dp::text::kFortuneDirectory << " is absent (apt-get install -y fortunes provides it)";
  const auto r = prepare("--out " + out() + " --sequences-per-shard 5000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fortune format"));
  EXPECT_THAT(r.output, HasSubstr("built from the corpus (written to <out>/vocab.txt)"));
  const auto vocab = dp::text::Vocabulary::load((fs::path(out()) / "vocab.txt").string());
  const dp::text::TextDataset data = dp::text::TextDataset::open(out(), vocab);
  EXPECT_GT(data.size(), 10000u);
  EXPECT_GE(data.num_shards(), 3u);
  EXPECT_LE(data.max_seq_length(), 128);
  const dp::text::TextDataset eval = dp::text::TextDataset::open(out() + "/eval", vocab);  // 2 % of the documents
  EXPECT_GT(eval.size(), 100u);
  EXPECT_LT(eval.size(), data.size() / 20);
}

TEST_F(PrepareText, BadInputIsOneClearError) {
  const std::string vocab = scratch_.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhi\n");
  const std::string text = scratch_.write("ok.txt", "hi\n");
  auto expect_error = [](const dp::testing::ProgramResult& r, const std::string& message) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("dptrain prepare-text: error: " + message)) << r.output;
  };
  expect_error(prepare(scratch_.write("empty.txt", "") + " --vocab " + vocab + " --out " + out("a")),
               "corpus " + (scratch_.path() / "empty.txt").string() + ": no text to train on");
  expect_error(prepare(scratch_.write("bin.txt", std::string("ab\0cd", 5)) + " --vocab " + vocab + " --out " + out("b")),
               "corpus file '" + (scratch_.path() / "bin.txt").string() + "' looks binary: a NUL byte at offset 2");
  const std::string no_mask = scratch_.write("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhi\n");
  expect_error(prepare(text + " --vocab " + no_mask + " --out " + out("c")),
               "vocab " + no_mask + ": has no [MASK] token (needed for masked-LM masking)");
  const std::string no_pad = scratch_.write("nopad.txt", "[UNK]\n[CLS]\n[SEP]\n[MASK]\nhi\n");
  expect_error(prepare(text + " --vocab " + no_pad + " --out " + out("c")),
               "vocab " + no_pad + ": has no [PAD] token (needed for padding sequences to a common length)");
  // A stream can be read once; building a vocabulary reads the corpus twice. With --vocab it will do.
  expect_error(dp::testing::run_program("cat " + text + " | " + dp::testing::dptrain_binary() +
                                        " prepare-text /dev/stdin --out " + out("c")),
               "'/dev/stdin' is a pipe or device, which can be read only once, and building the vocabulary reads "
               "the corpus twice");
  const auto piped = dp::testing::run_program("cat " + text + " | " + dp::testing::dptrain_binary() +
                                              " prepare-text /dev/stdin --vocab " + vocab + " --out " + out("piped") +
                                              " --eval-fraction 0");
  EXPECT_EQ(piped.exit_code, 0) << piped.output;
  ASSERT_EQ(prepare(text + " --vocab " + vocab + " --out " + out("d") + " --eval-fraction 0").exit_code, 0);
  expect_error(prepare(text + " --vocab " + vocab + " --out " + out("d")),
               "'" + out("d") + "' exists already; choose a new --out (shards are never overwritten)");
  // A usage error (CLI11's) is not a run: a missing --out.
  EXPECT_NE(prepare(text).exit_code, 0);
  EXPECT_FALSE(fs::exists(out("a")) || fs::exists(out("b")) || fs::exists(out("c")));  // nothing half-written
}

// NOTE [ prepare-text's output ]: `--out dir/` names dir; a built vocabulary is recorded in the
// shards' meta.json by the path it is written to; <out> appears whole (built beside it under
// "<out>.prepare.<pid>" and renamed), and a staging folder whose process is gone is removed.
TEST_F(PrepareText, TheOutputFolderAppearsWholeAndNamesItsVocabulary) {
  std::string text;
  for (int d = 0; d < 10; ++d) text += "The cat sat.\nA dog ran.\n\n";
  const std::string corpus = scratch_.write("corpus.txt", text);
  // A staging folder of a process that no longer exists (pids stay below 2^22 on Linux).
  fs::create_directories(scratch_.path() / "shards.prepare.999999999" / "shard_00000");
  const auto r = prepare(corpus + " --out " + out() + "/ --max-seq-length 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("removed " + (scratch_.path() / "shards.prepare.999999999").string() +
                                  ", left by a prepare-text that did not finish"));
  EXPECT_THAT(r.output, HasSubstr("under " + out() + ","));
  std::vector<std::string> beside;
  for (const auto& e : fs::directory_iterator(scratch_.path())) beside.push_back(e.path().filename().string());
  std::sort(beside.begin(), beside.end());
  EXPECT_EQ(beside, (std::vector<std::string>{"corpus.txt", "shards"}));
  const std::string vocab = out() + "/vocab.txt";
  const dp::text::TextDataset data = dp::text::TextDataset::open(out(), dp::text::Vocabulary::load(vocab));
  EXPECT_THAT(dp::testing::read_text_file(fs::path(out()) / "shard_00000" / "meta.json"),
              HasSubstr("\"source\": \"" + vocab + "\""));
  EXPECT_GT(data.size(), 0u);
}

}  // namespace
