// Fuzz target: the config loader (YAML text and --set overrides), launch/config.h.
//
// Input: the YAML document, optionally followed by a NUL byte and NUL-separated overrides
// ("section.key=value"), so the seed corpus is plain recipes. A dp::Error is the expected answer
// to bad input; anything else escaping, a crash or a sanitizer report is a finding. An accepted
// config must also survive the round trip through its resolved YAML unchanged.
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "launch/config.h"
#include "runtime/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (size_t at = nul; at != std::string::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    overrides.push_back(input.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  dp::Config config;
  try {
    config = dp::config_from_yaml_string(yaml, "fuzz.yaml", overrides);
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
