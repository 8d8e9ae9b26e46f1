// Running a program the way a user would (through the shell) and capturing what it printed.
#pragma once

#include <string>

namespace dp::testing {

struct ProgramResult {
  int exit_code = -1;  // 128 + signal when killed by one
  std::string output;  // stdout and stderr together
};

// Runs `command` with /bin/sh, stderr merged into stdout.
ProgramResult run_program(const std::string& command);

// The dptrain binary of this build tree.
std::string dptrain_binary();

}  // namespace dp::testing
