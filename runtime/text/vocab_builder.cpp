#include "runtime/text/vocab_builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "runtime/core/error.h"
#include "runtime/io/posix_file.h"

namespace dp::text {

Vocabulary build_vocabulary(const std::vector<std::string>& files, CorpusFormat format, size_t words,
                            const BasicTokenizerOptions& options) {
  const BasicTokenizer basic(options);
  std::unordered_map<std::string, size_t> counts;
  std::set<std::string> chars;
  BasicTokens tokens;
  for (const std::string& path : files) {
    for (const Document& d : read_documents(path, format)) {
      for (const std::string& s : d.sentences) {
        basic.split(s, tokens);
        for (size_t i = 0; i < tokens.size(); ++i) {
          const std::string_view t = tokens[i];
          ++counts[std::string(t)];
          for (size_t k = 0; k < t.size();) {  // UTF-8 code points (the text was validated)
            const auto lead = static_cast<unsigned char>(t[k]);
            const size_t n = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
            chars.insert(std::string(t.substr(k, n)));
            k += n;
          }
        }
      }
    }
  }
  std::vector<std::string> vocab = {std::string(kPadToken), std::string(kUnkToken), std::string(kClsToken),
                                    std::string(kSepToken), std::string(kMaskToken)};
  std::set<std::string> have(vocab.begin(), vocab.end());
  auto add = [&](const std::string& t) {
    if (have.insert(t).second) vocab.push_back(t);
  };
  for (const std::string& c : chars) add(c);
  for (const std::string& c : chars) add(std::string(kContinuationPrefix) + c);
  std::vector<std::pair<size_t, std::string>> by_count;
  by_count.reserve(counts.size());
  for (const auto& [word, n] : counts) by_count.emplace_back(n, word);
  std::sort(by_count.begin(), by_count.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  for (size_t i = 0; i < by_count.size() && i < words; ++i) add(by_count[i].second);
  return Vocabulary(std::move(vocab));
}

void write_vocabulary(const std::string& path, const Vocabulary& vocab) {
  std::string text;
  for (const std::string& t : vocab.tokens()) text += t + "\n";
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  io::FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  DP_CHECK(fd.get() >= 0, "vocab: cannot create '", tmp, "': ", io::errno_text());
  try {
    io::write_full(fd.get(), text.data(), text.size(), tmp, "vocab");
    DP_CHECK(::fsync(fd.get()) == 0, "vocab: fsync of '", tmp, "' failed: ", io::errno_text());
    DP_CHECK(fd.close() == 0, "vocab: closing '", tmp, "' failed: ", io::errno_text());
    DP_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "vocab: cannot rename '", tmp, "' to '", path, "': ",
             io::errno_text());
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace dp::text
