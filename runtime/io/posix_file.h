// Small POSIX file helpers shared by the writers and readers of runtime/io and runtime/text: an
// owning file descriptor, and whole reads and writes that retry EINTR and report a failure
// naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dp::io {

// Owns a file descriptor (-1: none) and closes it when it goes.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();
  int get() const { return fd_; }
  // Closes now, so that a delayed write error is reported, not swallowed; returns close()'s result.
  int close();

 private:
  int fd_;
};

// strerror(errno), for messages.
std::string errno_text();

// Writes all n bytes; a dp::Error "<who>: writing '<path>' failed: <reason>" otherwise (a full
// disk says so).
void write_full(int fd, const void* buf, size_t n, const std::string& path, const char* who);

// Reads up to n bytes at `offset`; fewer only at the end of the file. A dp::Error "<who>:
// reading '<path>' failed: <reason>" on an error.
size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const std::string& path, const char* who);

}  // namespace dp::io
