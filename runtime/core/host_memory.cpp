#include "runtime/core/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dp {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A limit file's value: bytes, or nullopt for "max", an unset v1 limit (≈ 2^63 rounded to pages)
// or text that is not a number.
std::optional<double> limit_value(const std::string& text) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;  // "max\n", empty
  if (value >= (1ULL << 60)) return std::nullopt;
  return static_cast<double>(value);
}

// The lowest limit in `file` along `path` and its parents under `base`.
std::optional<double> lowest_on_the_way_up(const std::filesystem::path& base, std::string path,
                                           const char* file) {
  std::optional<double> lowest;
  for (;;) {
    const std::filesystem::path dir = path.empty() || path == "/" ? base : base / path.substr(1);
    if (const std::optional<double> v = limit_value(read_file((dir / file).string())))
      lowest = lowest ? std::min(*lowest, *v) : *v;
    if (path.empty() || path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
  }
  return lowest;
}

}  // namespace

std::string gib_text(double bytes, int decimals) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f GiB", decimals, bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::optional<double> cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  std::optional<double> lowest;
  const auto take = [&](std::optional<double> v) {
    if (v) lowest = lowest ? std::min(*lowest, *v) : *v;
  };
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    // "hierarchy-ID:controller-list:path"; v2 is "0::path".
    const size_t first = line.find(':'), second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1), path = line.substr(second + 1);
    if (controllers.empty()) {
      take(lowest_on_the_way_up(cgroup_root, path, "memory.max"));
      continue;
    }
    std::istringstream names(controllers);
    for (std::string name; std::getline(names, name, ',');)
      if (name == "memory")
        take(lowest_on_the_way_up(std::filesystem::path(cgroup_root) / "memory", path, "memory.limit_in_bytes"));
  }
  return lowest;
}

double HostMemory::usable_bytes() const {
  const double machine = available_bytes.value_or(physical_bytes) + free_swap_bytes;
  if (cgroup_limit_bytes && (machine <= 0 || *cgroup_limit_bytes < machine)) return *cgroup_limit_bytes;
  return machine;
}

std::string HostMemory::describe() const {
  const double machine = available_bytes.value_or(physical_bytes) + free_swap_bytes;
  if (cgroup_limit_bytes && (machine <= 0 || *cgroup_limit_bytes < machine))
    return gib_text(usable_bytes()) + " (the cgroup's memory limit)";
  return gib_text(usable_bytes()) + " (" + (available_bytes ? "available " : "physical ") +
         gib_text(available_bytes.value_or(physical_bytes)) + " + free swap " + gib_text(free_swap_bytes) + ")";
}

size_t automatic_cpu_memory_limit(const HostMemory& memory, int processes) {
  return static_cast<size_t>(kTensorShareOfUsableMemory * memory.usable_bytes() / std::max(processes, 1));
}

std::string automatic_cpu_memory_limit_source(const HostMemory& memory, int processes) {
  char share[16];
  std::snprintf(share, sizeof share, "%.0f %%", kTensorShareOfUsableMemory * 100.0);
  return std::string(share) + " of the memory this node had left at the start, " + memory.describe() +
         (processes > 1 ? ", shared by its " + std::to_string(processes) + " ranks" : std::string());
}

HostMemory host_memory() {
  HostMemory m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) m.physical_bytes = static_cast<double>(pages) * static_cast<double>(page);
  std::istringstream meminfo(read_file("/proc/meminfo"));
  for (std::string line; std::getline(meminfo, line);) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1)
      m.available_bytes = static_cast<double>(kib) * 1024.0;
    if (std::sscanf(line.c_str(), "SwapFree: %llu kB", &kib) == 1)
      m.free_swap_bytes = static_cast<double>(kib) * 1024.0;
  }
  m.cgroup_limit_bytes = cgroup_memory_limit(read_file("/proc/self/cgroup"), "/sys/fs/cgroup");
  return m;
}

}  // namespace dp
