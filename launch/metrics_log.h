// Machine-readable metrics: one JSON object per line (JSON Lines), flushed per record so a tail
// or a crashed run still leaves every complete line readable.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dp {

class MetricsLog {
 public:
  // Creates the parent directories and a NEW file at `path`: a file already there is first kept
  // under another name (keep_existing_file), so nothing an earlier run wrote is lost.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  // Whole lines as they are (a resumed run's earlier records, from its checkpoint).
  void write_lines(const std::string& lines);
  // Everything written so far (a checkpoint keeps it: NOTE [ Resuming a run ]).
  const std::string& text() const { return text_; }
  const std::string& path() const { return path_; }
  // Where an earlier run's file at path() was moved to; empty when there was none.
  const std::string& kept_previous() const { return kept_previous_; }

 private:
  std::string path_;
  std::string kept_previous_;
  std::string text_;
  std::FILE* file_ = nullptr;
};

// If `path` names an existing file (or symbolic link), moves it to
// "<path>.<its modification time, UTC, YYYYmmddTHHMMSSZ>", or "...Z.2", ".3", ... when that name
// is taken, and returns the new name; returns "" when nothing is at `path`. The move never
// replaces anything (renameat2 RENAME_NOREPLACE, or link + unlink where the file system lacks
// it). A directory or other non-file at `path` is an error naming `key` (the config key that
// chose the path: "run.metrics_file"), left untouched.
std::string keep_existing_file(const std::string& path, const std::string& key);

// Whether a file that dptrain will write at `path` finds one there (to be kept aside); throws
// naming `key` when a directory or another non-file is there (checked before a run trains, so
// that its end does not fail).
bool check_output_file_path(const std::string& path, const std::string& key);

}  // namespace dp
