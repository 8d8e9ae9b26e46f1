// A WordPiece vocabulary built from a corpus, for corpora that come without one (the built-in
// fortunes demo): the special tokens, every character seen (alone and as a "##" continuation, so
// every word can be spelled and [UNK] stays rare), then the most frequent basic tokens. Simpler
// than Google's WordPiece training (which merges pieces by likelihood): frequent words are whole
// tokens, rare ones are spelled in characters.
#pragma once

#include <string>
#include <vector>

#include "runtime/text/corpus.h"
#include "runtime/text/wordpiece.h"

namespace dp::text {

// From `files` read in `format`, split by a basic tokenizer with `options`: [PAD] [UNK] [CLS]
// [SEP] [MASK], the characters, their "##" forms, then up to `words` most frequent tokens (ties
// by text), each once. Throws dp::Error naming a file that cannot be read or is not text.
Vocabulary build_vocabulary(const std::vector<std::string>& files, CorpusFormat format, size_t words,
                            const BasicTokenizerOptions& options = {});

// Writes vocab.txt (one token a line, id order) under a temporary name, fsynced and renamed.
void write_vocabulary(const std::string& path, const Vocabulary& vocab);

}  // namespace dp::text
