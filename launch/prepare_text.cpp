#include "launch/prepare_text.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/text/corpus.h"
#include "runtime/text/text_shards.h"
#include "runtime/text/vocab_builder.h"
#include "runtime/text/wordpiece.h"

namespace dp {

namespace {

int prepare(const PrepareTextArgs& args, std::FILE* out) {
  using namespace dp::text;
  namespace fs = std::filesystem;
  const auto start = std::chrono::steady_clock::now();
  DP_CHECK(!args.out.empty(), "--out is required (the shard folder to create)");
  DP_CHECK(!fs::exists(args.out), "'", args.out,
           "' exists already; choose a new --out (shards are never overwritten)");
  std::vector<std::string> inputs = args.inputs;
  const bool builtin = inputs.empty();
  if (builtin) {
    DP_CHECK(fs::is_directory(std::string(kFortuneDirectory)), "no input files given and the built-in "
             "corpus ", kFortuneDirectory, " is absent (apt-get install fortunes, or name text files)");
    inputs = fortune_files();
  }
  const CorpusFormat format =
      args.format.empty() ? (builtin ? CorpusFormat::kFortune : CorpusFormat::kPlain) : corpus_format_from_name(args.format);
  BasicTokenizerOptions basic;
  basic.lower_case = args.lower_case;
  TokenizerOptions tokenizer_options;
  tokenizer_options.basic = basic;

  std::shared_ptr<Vocabulary> vocab;
  std::string vocab_note;
  if (args.vocab.empty()) {
    vocab = std::make_shared<Vocabulary>(build_vocabulary(inputs, format, static_cast<size_t>(args.vocab_words), basic));
    vocab_note = "built from the corpus";
  } else {
    vocab = std::make_shared<Vocabulary>(Vocabulary::load(args.vocab));
    vocab_note = args.vocab;
  }
  // Sequences need [CLS] and [SEP]; training masks with [MASK]: a vocab without them is refused now.
  vocab->cls_id();
  vocab->sep_id();
  vocab->mask_id();
  const Tokenizer tokenizer(vocab, tokenizer_options);
  const TokenizedCorpus corpus = tokenize_files(inputs, format, tokenizer);
  DP_CHECK(args.eval_fraction >= 0.0 && args.eval_fraction <= 0.5, "--eval-fraction must be in [0, 0.5], got ",
           args.eval_fraction);
  size_t held_out = 0;
  if (args.eval_fraction > 0) {
    const size_t documents = corpus.num_documents();
    held_out = std::max<size_t>(1, static_cast<size_t>(std::llround(args.eval_fraction * static_cast<double>(documents))));
    DP_CHECK(held_out < documents, "the corpus has ", documents, " document", documents == 1 ? "" : "s",
             ": too few to hold out ", held_out, " for evaluation (--eval-fraction ", args.eval_fraction,
             "); add text, or --eval-fraction 0 for no evaluation split");
  }
  auto [train_corpus, eval_corpus] = split_documents(corpus, held_out, args.seed);
  SequenceOptions sequence_options;
  sequence_options.max_seq_length = args.max_seq_length;
  sequence_options.short_seq_prob = args.short_seq_prob;
  sequence_options.dupe_factor = args.dupe_factor;
  sequence_options.seed = args.seed;
  const Sequences sequences = make_sequences(train_corpus, *vocab, sequence_options);
  const Sequences eval_sequences = held_out > 0 ? make_sequences(eval_corpus, *vocab, sequence_options) : Sequences{};
  DP_CHECK(args.sequences_per_shard > 0, "--sequences-per-shard must be positive, got ",
           args.sequences_per_shard);
  const TextShardProvenance provenance{format, sequence_options, corpus.files};
  fs::create_directories(fs::path(args.out).parent_path().empty() ? fs::path(".") : fs::path(args.out).parent_path());
  const std::vector<std::string> shards =
      write_text_shards(args.out, sequences, *vocab, provenance, static_cast<size_t>(args.sequences_per_shard));
  try {  // <out> is ours from here: a failure removes it whole, nothing is left half-written
    if (held_out > 0)
      write_text_shards((fs::path(args.out) / "eval").string(), eval_sequences, *vocab, provenance,
                        static_cast<size_t>(args.sequences_per_shard));
    if (args.vocab.empty()) write_vocabulary((fs::path(args.out) / "vocab.txt").string(), *vocab);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(args.out, ignored);
    throw;
  }

  size_t unk = 0;
  for (const int32_t id : corpus.ids) unk += id == vocab->unk_id();
  uint64_t bytes = 0;
  for (const SourceFile& f : corpus.files) bytes += f.bytes;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(out,
               "prepare-text: %zu %s (%.2f MB, %s format): %zu documents, %zu sentences, %zu tokens (%.3f %% [UNK])\n"
               "  vocabulary: %zu tokens, %s%s\n"
               "  %zu sequences of at most %d tokens (mean %.1f) in %zu %s under %s, %.2f s\n"
               "  evaluation: %zu held-out documents, %zu sequences under %s\n",
               corpus.files.size(), corpus.files.size() == 1 ? "file" : "files", static_cast<double>(bytes) / 1e6, std::string(corpus_format_name(format)).c_str(),
               corpus.num_documents(), corpus.num_sentences(), corpus.ids.size(),
               corpus.ids.empty() ? 0.0 : 100.0 * static_cast<double>(unk) / static_cast<double>(corpus.ids.size()),
               vocab->size(), vocab_note.c_str(), args.vocab.empty() ? " (written to <out>/vocab.txt)" : "",
               sequences.size(), args.max_seq_length,
               sequences.size() ? static_cast<double>(sequences.ids.size()) / static_cast<double>(sequences.size()) : 0.0,
               shards.size(), shards.size() == 1 ? "shard" : "shards", args.out.c_str(), seconds, held_out,
               eval_sequences.size(), held_out > 0 ? (fs::path(args.out) / "eval").c_str() : "(none: --eval-fraction 0)");
  return 0;
}

}  // namespace

int run_prepare_text(const PrepareTextArgs& args, std::FILE* out, std::FILE* err) {
  try {
    return prepare(args, out);
  } catch (const std::exception& e) {
    std::fprintf(err, "dptrain prepare-text: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace dp
