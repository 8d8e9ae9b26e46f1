#include "common/run_program.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>

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

ProgramResult signalled_run(const std::string& launch, const std::filesystem::path& metrics, const std::string& signal,
                            const std::string& targets) {
  const std::string script = launch + " & p=$!; i=0; while [ $i -lt 1200 ] && ! grep -qs '\"event\":\"step\"' '" +
                             metrics.string() + "'; do sleep 0.05; i=$((i+1)); done; kill -" + signal + " " +
                             targets + "; wait $p";
  std::string quoted;
  for (char ch : script) {
    if (ch == '"' || ch == '$' || ch == '\\' || ch == '`') quoted += '\\';
    quoted += ch;
  }
  return run_program("sh -c \"" + quoted + "\"");
}

std::string mpirun(int ranks) {
  return "timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np " + std::to_string(ranks) + " ";
}

std::string dptrain_binary() {
  const char* carried = std::getenv("DPTRAIN_BINARY");
  return carried != nullptr && *carried != '\0' ? carried : std::string(DPTRAIN_BINARY_DIR) + "/launch/dptrain";
}

std::string model_digest(const std::string& output) {
  const size_t at = output.find("model digest ");
  return at == std::string::npos ? "" : output.substr(at + 13, 16);
}

double test_accuracy(const std::string& output) {
  const size_t at = output.find("test accuracy ");
  return at == std::string::npos ? -1.0 : std::stod(output.substr(at + 14));
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::filesystem::path make_test_dir(const std::string& prefix) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace dp::testing
