#include "launch/metrics_log.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace dp {

namespace {

// "20261124T093015Z" for a modification time.
std::string utc_stamp(const struct timespec& t) {
  std::tm utc{};
  gmtime_r(&t.tv_sec, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
  return text;
}

// Moves `from` to `to` only if nothing is at `to`. false (errno EEXIST) when `to` is taken.
bool move_without_replacing(const std::string& from, const std::string& to) {
  if (renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  // A file system without RENAME_NOREPLACE: link() also fails with EEXIST instead of replacing.
  if (link(from.c_str(), to.c_str()) != 0) return false;
  DP_CHECK(unlink(from.c_str()) == 0, "cannot remove '", from, "' after keeping it as '", to,
           "': ", std::strerror(errno));
  return true;
}

}  // namespace

bool check_output_file_path(const std::string& path, const std::string& key) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    DP_CHECK(errno == ENOENT, key, ": cannot inspect '", path, "': ", std::strerror(errno));
    return false;
  }
  DP_CHECK(!S_ISDIR(st.st_mode), key, ": '", path, "' is an existing directory, not a file; choose another ", key,
           " or run.output_dir (nothing was moved)");
  DP_CHECK(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode), key, ": '", path, "' exists and is not a regular file; ",
           "choose another ", key, " or run.output_dir (nothing was moved)");
  return true;
}

std::string keep_existing_file(const std::string& path, const std::string& key) {
  if (!check_output_file_path(path, key)) return "";
  struct stat st {};
  DP_CHECK(lstat(path.c_str(), &st) == 0, key, ": cannot inspect '", path, "': ", std::strerror(errno));
  const std::string base = path + "." + utc_stamp(st.st_mtim);
  for (int n = 1; n < 10000; ++n) {
    const std::string kept = n == 1 ? base : base + "." + std::to_string(n);
    if (move_without_replacing(path, kept)) return kept;
    DP_CHECK(errno == EEXIST || errno == ENOTEMPTY, "cannot keep the earlier '", path, "' as '", kept,
             "': ", std::strerror(errno));
  }
  throw Error("cannot keep the earlier '" + path + "': 9999 kept copies with its time stamp exist already");
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  DP_CHECK(!ec, "cannot create directory '", p.parent_path().string(), "' for the metrics file: ", ec.message());
  kept_previous_ = keep_existing_file(path, "run.metrics_file");
  // O_EXCL: if something appeared at `path` since, fail rather than overwrite it.
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  DP_CHECK(fd >= 0, "cannot create metrics file '", path, "': ", std::strerror(errno));
  file_ = fdopen(fd, "w");
  if (!file_) {
    const int err = errno;
    close(fd);
    throw Error("cannot open metrics file '" + path + "' for writing: " + std::strerror(err));
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) { write_lines(record.dump() + "\n"); }

void MetricsLog::write_lines(const std::string& lines) {
  DP_CHECK(std::fwrite(lines.data(), 1, lines.size(), file_) == lines.size() && std::fflush(file_) == 0,
           "writing metrics file '", path_, "' failed: ", std::strerror(errno));
  text_ += lines;
}

}  // namespace dp
