// The fuzzed bytes as a file: the IDX and safetensors readers take paths (they are the code
// users run, file handling included), so each input goes into one anonymous in-memory file
// (memfd) that is rewritten per input and opened by its /proc/self/fd path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

namespace dp::fuzz {

class MemoryFile {
 public:
  MemoryFile() : fd_(memfd_create("dptrain-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { close(fd_); }

  // Replaces the content with data[0, size) and returns the path to open.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || (size > 0 && pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("MemoryFile::write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace dp::fuzz
