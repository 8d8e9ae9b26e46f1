#include "launch/prepare_text.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "runtime/core/error.h"
#include "runtime/text/corpus.h"
#include "runtime/text/text_shards.h"
#include "runtime/text/vocab_builder.h"
#include "runtime/text/wordpiece.h"

namespace dp {

namespace {

namespace fs = std::filesystem;

// NOTE [ prepare-text's output ]
// <out> appears whole or not at all: everything (training shards, eval/, vocab.txt) is written
// under "<out>.prepare.<pid>" beside it, which is renamed to <out> at the end. A failure removes
// the folder; a process killed meanwhile (Ctrl-C, SIGKILL) leaves only it, never a partial <out>,
// and the next prepare-text for the same <out> removes the ones whose process is gone.
std::string staging_prefix(const fs::path& target) { return target.filename().string() + ".prepare."; }

void remove_abandoned_staging(const fs::path& target, std::FILE* out) {
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = staging_prefix(target);
  std::error_code ec;
  std::vector<fs::path> abandoned;
  for (const fs::directory_entry& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // "<out>.prepare.<pid>" (or its own "<...>.tmp.<pid>" while the shards were being written)
    const std::string rest = name.substr(prefix.size());
    const size_t digits = std::min(rest.find_first_not_of("0123456789"), rest.size());
    if (digits == 0 || digits > 9) continue;  // not a pid (Linux's stay below 2^22)
    const long pid = std::stol(rest.substr(0, digits));
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH)) continue;  // still running
    abandoned.push_back(e.path());
  }
  for (const fs::path& dir : abandoned) {
    fs::remove_all(dir, ec);
    std::fprintf(out, "prepare-text: removed %s, left by a prepare-text that did not finish\n", dir.c_str());
  }
}

int prepare(const PrepareTextArgs& args, std::FILE* out) {
  using namespace dp::text;
  const auto start = std::chrono::steady_clock::now();
  DP_CHECK(!args.out.empty(), "--out is required (the shard folder to create)");
  fs::path target = fs::path(args.out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();  // "out/" is "out"
  DP_CHECK(!target.empty() && target.filename() != "." && target.filename() != "..", "--out '", args.out,
           "' does not name a new folder");
  std::error_code ec;
  DP_CHECK(!fs::exists(fs::symlink_status(target, ec)), "'", args.out,
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
  const std::string vocab_path = (target / "vocab.txt").string();
  if (args.vocab.empty()) {
    // Building the vocabulary reads the corpus once, tokenizing it a second time.
    for (const std::string& input : inputs) {
      const fs::file_status status = fs::status(input, ec);
      DP_CHECK(!fs::exists(status) || fs::is_regular_file(status) || fs::is_directory(status), "'", input,
               "' is a pipe or device, which can be read only once, and building the vocabulary reads the corpus ",
               "twice: give a file (e.g. save the stream first), or a vocabulary with --vocab");
    }
    vocab = std::make_shared<Vocabulary>(build_vocabulary(inputs, format, static_cast<size_t>(args.vocab_words), basic));
    vocab->set_source(vocab_path);  // where it will be: the shards' meta.json names it
    vocab_note = "built from the corpus";
  } else {
    vocab = std::make_shared<Vocabulary>(Vocabulary::load(args.vocab));
    vocab_note = args.vocab;
  }
  // Sequences need [CLS] and [SEP], training pads with [PAD] and masks with [MASK]: a vocab
  // without them is refused now.
  vocab->cls_id();
  vocab->sep_id();
  vocab->pad_id();
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
  // NOTE [ prepare-text's output ]
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  fs::create_directories(parent, ec);
  DP_CHECK(!ec, "--out: cannot create the folder '", parent.string(), "': ", ec.message());
  remove_abandoned_staging(target, out);
  const fs::path staging = parent / (staging_prefix(target) + std::to_string(::getpid()));
  size_t shards = 0;
  try {
    shards = write_text_shards(staging.string(), sequences, *vocab, provenance,
                               static_cast<size_t>(args.sequences_per_shard)).size();
    if (held_out > 0)
      write_text_shards((staging / "eval").string(), eval_sequences, *vocab, provenance,
                        static_cast<size_t>(args.sequences_per_shard));
    if (args.vocab.empty()) write_vocabulary((staging / "vocab.txt").string(), *vocab);
    // rename(2) would replace an empty folder made meanwhile: it must not.
    DP_CHECK(!fs::exists(fs::symlink_status(target, ec)), "'", args.out, "' appeared while the shards were being ",
             "written (another prepare-text?); it is kept as it is");
    DP_CHECK(::rename(staging.c_str(), target.c_str()) == 0, "cannot rename '", staging.string(), "' to '",
             target.string(), "': ", std::strerror(errno));
  } catch (...) {
    fs::remove_all(staging, ec);
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
               shards, shards == 1 ? "shard" : "shards", target.c_str(), seconds, held_out,
               eval_sequences.size(), held_out > 0 ? (target / "eval").c_str() : "(none: --eval-fraction 0)");
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
