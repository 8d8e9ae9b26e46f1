#include "launch/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace dp {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  DP_CHECK(!ec, "cannot create directory '", p.parent_path().string(), "' for the metrics file: ", ec.message());
  file_ = std::fopen(path.c_str(), "w");
  DP_CHECK(file_ != nullptr, "cannot open metrics file '", path, "' for writing: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  DP_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
           "writing metrics file '", path_, "' failed: ", std::strerror(errno));
}

}  // namespace dp
