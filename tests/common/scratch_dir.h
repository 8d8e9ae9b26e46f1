// A per-test temporary directory (unique by process and test name), removed when it goes, with
// a helper that writes a file into it.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "common/run_program.h"

namespace dp::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) : dir_(make_test_dir(prefix)) {}
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return dir_; }
  // Writes `bytes` to <dir>/<name> (binary) and returns the file's path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path file = dir_ / name;
    std::ofstream(file, std::ios::binary) << bytes;
    return file.string();
  }

 private:
  std::filesystem::path dir_;
};

}  // namespace dp::testing
