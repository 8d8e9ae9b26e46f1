// Fuzz target: the config loader (YAML text and --set overrides), launch/config.h.
//
// Input: the YAML document, then optionally a separator, either a NUL byte or a line
// "---SET---", followed by the overrides ("section.key=value"), one per line (a NUL also ends
// one; empty lines are skipped), so seeds are plain recipes with readable overrides appended.
// A dp::Error is the expected answer to bad input; anything else escaping, a crash or a sanitizer
// report is a finding. An accepted config must also survive the round trip through its resolved
// YAML (to_yaml) unchanged.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "launch/config.h"
#include "runtime/core/error.h"

namespace {

struct FuzzInput {
  std::string yaml;
  std::vector<std::string> overrides;
};

FuzzInput split(std::string_view input) {
  constexpr std::string_view kSetLine = "---SET---";
  size_t cut = input.find('\0'), skip = 1;
  for (size_t line = 0; line < input.size() && line < cut;) {
    const size_t end = std::min(input.find('\n', line), input.size());
    if (input.substr(line, end - line) == kSetLine) {
      cut = line;
      skip = kSetLine.size() + 1;
      break;
    }
    line = end + 1;
  }
  FuzzInput out{std::string(input.substr(0, std::min(cut, input.size()))), {}};
  if (cut >= input.size()) return out;
  std::string_view rest = input.substr(std::min(cut + skip, input.size()));
  while (!rest.empty()) {
    const size_t end = std::min(rest.find_first_of(std::string_view("\n\0", 2)), rest.size());
    if (end > 0) out.overrides.emplace_back(rest.substr(0, end));
    rest.remove_prefix(std::min(end + 1, rest.size()));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const FuzzInput input = split(std::string_view(reinterpret_cast<const char*>(data), size));
  dp::Config config;
  try {
    config = dp::config_from_yaml_string(input.yaml, "fuzz.yaml", input.overrides);
  } catch (const dp::Error&) {
    return 0;
  }
  const std::string resolved = dp::to_yaml(config);
  try {
    if (!(dp::config_from_yaml_string(resolved, "resolved.yaml") == config)) {
      std::fprintf(stderr, "fuzz_config: the resolved YAML loads as a different config:\n%s\n", resolved.c_str());
      std::abort();
    }
  } catch (const dp::Error& e) {
    std::fprintf(stderr, "fuzz_config: the resolved YAML of an accepted config is refused: %s\n%s\n", e.what(),
                 resolved.c_str());
    std::abort();
  }
  return 0;
}
