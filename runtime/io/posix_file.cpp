#include "runtime/io/posix_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.h"

namespace dp::io {

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

std::string errno_text() { return std::strerror(errno); }

void write_full(int fd, const void* buf, size_t n, const std::string& path, const char* who) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, static_cast<const char*>(buf) + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    DP_CHECK(r > 0, who, ": writing '", path, "' failed: ", r < 0 ? errno_text() : std::string("no progress"),
             r < 0 && errno == ENOSPC ? " (the disk is full)" : "");
    done += static_cast<size_t>(r);
  }
}

size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const std::string& path, const char* who) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    DP_CHECK(r >= 0, who, ": reading '", path, "' failed: ", errno_text());
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

}  // namespace dp::io
