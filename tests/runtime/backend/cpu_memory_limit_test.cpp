// NOTE [ CPU memory limit ]: the CPU caching allocator refuses, with an error naming the sizes and
// where the limit comes from, what would take the bytes it holds past its limit — after giving
// its cached blocks back — instead of letting Linux's out-of-memory killer end the process; and
// the limit's sources (available memory, swap, the cgroup's limit).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "common/expect_error.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/core/host_memory.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"

namespace dp {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

Tensor mib_tensor(int64_t mib, Device cpu) { return empty({mib * int64_t(kMiB) / 4}, kFloat32, cpu); }

TEST(CpuMemoryLimit, AnAllocationPastTheLimitIsAnErrorNamingTheSizesAndTheSource) {
  CpuBackend backend(1);
  backend.set_memory_limit(64 * kMiB, "a test's limit");
  Device cpu(&backend);
  Tensor first = mib_tensor(40, cpu);
  EXPECT_EQ(backend.held_bytes(), 40 * kMiB);
  EXPECT_ERROR_CONTAINS(mib_tensor(40, cpu), "CPU memory: a tensor of 0.04 GiB would bring what this process holds "
                                             "for tensors to 0.08 GiB, over its limit of 0.06 GiB (a test's limit); "
                                             "past it Linux would kill the run without a message. Lower the batch "
                                             "size or the model's size");
  EXPECT_EQ(backend.held_bytes(), 40 * kMiB) << "a refused allocation holds nothing";
  Tensor small = mib_tensor(24, cpu);  // up to the limit exactly
  EXPECT_EQ(backend.held_bytes(), 64 * kMiB);
  EXPECT_ERROR_CONTAINS(empty({1}, kFloat32, cpu), "over its limit of 0.06 GiB");
}

TEST(CpuMemoryLimit, CachedBlocksAreGivenBackBeforeRefusingAndReuseIsNotChargedTwice) {
  CpuBackend backend(1);
  backend.set_memory_limit(64 * kMiB, "a test's limit");
  Device cpu(&backend);
  mib_tensor(40, cpu);  // freed at once: cached, still held
  EXPECT_EQ(backend.cached_bytes(), 40 * kMiB);
  EXPECT_EQ(backend.held_bytes(), 40 * kMiB);
  {
    Tensor again = mib_tensor(40, cpu);  // the cached block
    EXPECT_EQ(backend.held_bytes(), 40 * kMiB);
    EXPECT_EQ(backend.cached_bytes(), 0u);
  }
  // Another size class: 40 cached + 48 would pass 64, so the cache goes back to the system first.
  Tensor other = mib_tensor(48, cpu);
  EXPECT_EQ(backend.cached_bytes(), 0u);
  EXPECT_EQ(backend.held_bytes(), 48 * kMiB);
  other = Tensor();
  backend.release_cached();
  EXPECT_EQ(backend.held_bytes(), 0u);
}

TEST(CpuMemoryLimit, ZeroMeansNoLimitAndARuntimeSetsOneFromThisMachine) {
  CpuBackend backend(1);
  backend.set_memory_limit(0, "");
  EXPECT_EQ(backend.memory_limit(), 0u);
  Device cpu(&backend);
  EXPECT_NO_THROW(mib_tensor(40, cpu));

  Runtime runtime;
  auto& runtime_cpu = static_cast<CpuBackend&>(runtime.cpu().backend());
  const HostMemory memory = host_memory();
  EXPECT_GT(memory.physical_bytes, 0.0);
  EXPECT_GT(memory.usable_bytes(), 0.0);
  EXPECT_GT(runtime_cpu.memory_limit(), 0u);
  EXPECT_LE(static_cast<double>(runtime_cpu.memory_limit()), memory.physical_bytes + memory.free_swap_bytes);
  EXPECT_EQ(automatic_cpu_memory_limit(memory, 4),
            static_cast<size_t>(kTensorShareOfUsableMemory * memory.usable_bytes() / 4));

  RuntimeOptions options;
  options.cpu_memory_limit_bytes = 0;
  Runtime unlimited(options);
  EXPECT_EQ(static_cast<CpuBackend&>(unlimited.cpu().backend()).memory_limit(), 0u);
}

TEST(CpuMemoryLimit, UsableMemoryIsAvailablePlusFreeSwapOrTheCgroupsLimit) {
  HostMemory m;
  m.physical_bytes = 32.0 * (1 << 30);
  EXPECT_DOUBLE_EQ(m.usable_bytes(), 32.0 * (1 << 30));  // MemAvailable unknown: the physical memory
  m.available_bytes = 20.0 * (1 << 30);
  m.free_swap_bytes = 2.0 * (1 << 30);
  EXPECT_DOUBLE_EQ(m.usable_bytes(), 22.0 * (1 << 30));
  EXPECT_EQ(m.describe(), "22.0 GiB (available 20.0 GiB + free swap 2.0 GiB)");
  m.cgroup_limit_bytes = 8.0 * (1 << 30);
  EXPECT_DOUBLE_EQ(m.usable_bytes(), 8.0 * (1 << 30));
  EXPECT_EQ(m.describe(), "8.0 GiB (the cgroup's memory limit)");
  m.cgroup_limit_bytes = 64.0 * (1 << 30);  // above what is there: not the bound
  EXPECT_DOUBLE_EQ(m.usable_bytes(), 22.0 * (1 << 30));
}

class CgroupLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() / ("dptrain_cgroup_" + std::to_string(::getpid()));
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& relative, const std::string& text) {
    const std::filesystem::path p = root_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::filesystem::path root_;
};

TEST_F(CgroupLimit, Version2TakesTheLowestLimitOnTheWayToTheRoot) {
  write("memory.max", "max\n");
  write("slurm/job_7/memory.max", "1073741824\n");
  write("slurm/job_7/step_0/memory.max", "max\n");
  EXPECT_EQ(cgroup_memory_limit("0::/slurm/job_7/step_0\n", root_.string()), 1073741824.0);
  write("slurm/memory.max", "536870912\n");
  EXPECT_EQ(cgroup_memory_limit("0::/slurm/job_7/step_0\n", root_.string()), 536870912.0);
  EXPECT_EQ(cgroup_memory_limit("0::/\n", root_.string()), std::nullopt);
  EXPECT_EQ(cgroup_memory_limit("0::/elsewhere\n", root_.string()), std::nullopt) << "no such folder: no limit";
}

TEST_F(CgroupLimit, Version1ReadsTheMemoryControllersHierarchy) {
  write("memory/memory.limit_in_bytes", "9223372036854771712\n");  // unset
  write("memory/job/memory.limit_in_bytes", "2147483648\n");
  const std::string cgroup = "9:name=systemd:/\n5:cpu,cpuacct:/job\n4:memory:/job\n0::/\n";
  EXPECT_EQ(cgroup_memory_limit(cgroup, root_.string()), 2147483648.0);
  EXPECT_EQ(cgroup_memory_limit("4:cpuset,memory:/job\n", root_.string()), 2147483648.0);
  EXPECT_EQ(cgroup_memory_limit("4:memory:/\n", root_.string()), std::nullopt);
  EXPECT_EQ(cgroup_memory_limit("5:cpu,cpuacct:/job\n", root_.string()), std::nullopt) << "no memory controller";
  EXPECT_EQ(cgroup_memory_limit("", root_.string()), std::nullopt);
}

}  // namespace
}  // namespace dp
