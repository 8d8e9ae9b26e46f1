// Command line of the dptrain program.
#pragma once

#include <string>
#include <variant>
#include <vector>

namespace dp {

struct CliArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // "section.key=value"
  bool print_config = false;           // print the resolved config and exit
};

// Parses argv. Returns the arguments, or the exit code when the program should stop now
// (--help/--version: 0, after printing; a usage error: non-zero, after printing the message).
std::variant<CliArgs, int> parse_cli(int argc, const char* const* argv);

}  // namespace dp
