// `dptrain prepare-text`: text files → memory-mappable token shards for BERT pretraining
// (runtime/text/text_shards.h), with the vocabulary given (BERT's vocab.txt) or built from the
// corpus. No config, no MPI: a one-off data step, as Google's create_pretraining_data.py.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace dp {

struct PrepareTextArgs {
  std::vector<std::string> inputs;  // text files; empty: the built-in corpus (Debian's fortunes)
  std::string format;               // plain | fortune; empty: fortune for the built-in corpus, else plain
  std::string out;                  // the shard folder to create (must not exist)
  std::string vocab;                // vocab.txt to use; empty: build one (written to <out>/vocab.txt)
  int vocab_words = 8000;           // words of a built vocabulary (besides specials and characters)
  bool lower_case = true;
  int max_seq_length = 128;
  double short_seq_prob = 0.1;
  int dupe_factor = 1;
  unsigned long long seed = 12345;
  long long sequences_per_shard = 100000;
  // Share of the documents held out for evaluation, written to <out>/eval (the trainer's default
  // data.eval_root): round(fraction x documents), at least one when the fraction is positive.
  double eval_fraction = 0.02;
};

// Runs it; prints what it did to `out`, errors to `err`. Exit status: 0 done, 1 an error (named).
int run_prepare_text(const PrepareTextArgs& args, std::FILE* out, std::FILE* err);

}  // namespace dp
