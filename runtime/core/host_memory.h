// How much memory this process may still use on its node: what the kernel counts as available and
// the free swap, capped by the memory limit of its control group (Slurm, containers). NOTE [ CPU memory limit ] in
// runtime/backend/cpu/cpu_backend.h says what it is for.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace dp {

struct HostMemory {
  double physical_bytes = 0;                 // sysconf(_SC_PHYS_PAGES) pages; 0 if unknown
  std::optional<double> available_bytes;     // MemAvailable in /proc/meminfo, when it says
  double free_swap_bytes = 0;                // SwapFree in /proc/meminfo
  std::optional<double> cgroup_limit_bytes;  // the lowest limit of this process's cgroup and its ancestors

  // What this process can still take before the out-of-memory killer acts: MemAvailable (else
  // the physical memory) plus free swap, or the cgroup's limit when lower; 0 when nothing is known.
  double usable_bytes() const;
  // "21.9 GiB (available 21.9 GiB + free swap 0.0 GiB)", or "8.0 GiB (the cgroup's memory limit)".
  std::string describe() const;
};

HostMemory host_memory();

// NOTE [ CPU memory limit ] (runtime/backend/cpu/cpu_backend.h): the CPU backend's limit when none
// is given — this share of usable_bytes() (the rest for what is not a tensor: the libraries' own
// buffers, the program, the kernel's needs), divided among `processes` on the node.
inline constexpr double kTensorShareOfUsableMemory = 0.9;
size_t automatic_cpu_memory_limit(const HostMemory& memory, int processes);
// Where that limit comes from, for the error: "90 % of the memory this node had left at the
// start, <describe()>[, shared by its N ranks]".
std::string automatic_cpu_memory_limit_source(const HostMemory& memory, int processes);

// "1.5 GiB" with `decimals` decimals, whatever the size (sizes set side by side read alike).
std::string gib_text(double bytes, int decimals = 1);

// The lowest memory limit on the way from a cgroup to the root, in bytes (nullopt: none).
// `proc_self_cgroup` is /proc/self/cgroup's text; `cgroup_root` the cgroup file system's mount
// (/sys/fs/cgroup): v2 reads <root><path>/memory.max, v1 <root>/memory<path>/memory.limit_in_bytes,
// for the path and each of its parents that exist ("max" and values ≥ 2^60 mean none). Exposed
// for tests, which give it a folder of their own.
std::optional<double> cgroup_memory_limit(const std::string& proc_self_cgroup, const std::string& cgroup_root);

}  // namespace dp
