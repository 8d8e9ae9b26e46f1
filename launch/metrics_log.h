// Machine-readable metrics: one JSON object per line (JSON Lines), flushed per record so a tail
// or a crashed run still leaves every complete line readable.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dp {

class MetricsLog {
 public:
  // Creates parent directories; truncates an existing file (a new run starts a new log).
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace dp
