// An NVTX injection library that records the ranges a program opens and closes, so tests can see
// the NVTX ranges dptrain emits without Nsight Systems (NOTE [ NVTX ranges ] in
// runtime/core/nvtx.h). Nsight attaches the same way: NVTX's first call in a process loads the
// library named by NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2, which fills in
// the functions the tool implements (here RangePushA and RangePop; every other NVTX call stays a
// no-op).
//
//   NVTX_INJECTION64_PATH=build/tests/libnvtx_recorder.so NVTX_RECORDER_FILE=ranges.tsv dptrain ...
//
// Each event is one line, written as it happens: "<thread id>\tpush\t<name>" or "<thread id>\tpop".
// A "%p" in NVTX_RECORDER_FILE becomes the process id (one file per rank under mpirun).
#include <nvtx3/nvToolsExt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

std::mutex file_mutex;
std::FILE* file = nullptr;

long thread_id() { return static_cast<long>(::syscall(SYS_gettid)); }

int NVTX_API record_push(const char* name) {
  const std::lock_guard lock(file_mutex);
  std::fprintf(file, "%ld\tpush\t%s\n", thread_id(), name != nullptr ? name : "");
  std::fflush(file);
  return 0;
}

int NVTX_API record_pop() {
  const std::lock_guard lock(file_mutex);
  std::fprintf(file, "%ld\tpop\n", thread_id());
  std::fflush(file);
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const char* pattern = std::getenv("NVTX_RECORDER_FILE");
  if (pattern == nullptr) return 0;  // NVTX then stays a no-op
  std::string path = pattern;
  if (const size_t at = path.find("%p"); at != std::string::npos)
    path = path.substr(0, at) + std::to_string(::getpid()) + path.substr(at + 2);
  if ((file = std::fopen(path.c_str(), "w")) == nullptr) return 0;
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) == 0 ||
      size <= NVTX_CBID_CORE_RangePop)
    return 0;
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&record_push);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&record_pop);
  return 1;
}
