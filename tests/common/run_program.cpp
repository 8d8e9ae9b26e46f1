#include "common/run_program.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

namespace dp::testing {

ProgramResult run_program(const std::string& command) {
  ProgramResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string dptrain_binary() { return std::string(DPTRAIN_BINARY_DIR) + "/launch/dptrain"; }

}  // namespace dp::testing
