#include "runtime/backend/cuda/cuda_check.h"

#include <cstdio>

namespace dp::cuda {

namespace {

std::string where(int device) {
  return device >= 0 ? " failed on cuda:" + std::to_string(device) + ": " : std::string(" failed: ");
}

std::string details(const char* name, const std::string& context) {
  return context.empty() ? detail::concat(" (", name, ")") : detail::concat(" (", name, "; ", context, ")");
}

}  // namespace

void throw_cuda_error(const char* call, cudaError_t status, int device, const std::string& context) {
  // Clears the runtime's last-error slot so that the next launch check does not report this
  // (non-sticky) failure again; sticky errors stay whatever we do.
  (void)cudaGetLastError();
  throw Error(detail::concat(call, where(device), cudaGetErrorString(status),
                             details(cudaGetErrorName(status), context)));
}

void throw_cublas_error(const char* call, cublasStatus_t status, int device, const std::string& context) {
  throw Error(detail::concat(call, where(device), cublasGetStatusString(status),
                             details(cublasGetStatusName(status), context)));
}

void throw_cudnn_error(const char* call, cudnnStatus_t status, int device, const std::string& context) {
  // cuDNN 9 keeps a more specific message for the last failure on this thread.
  char last[512] = {};
  cudnnGetLastErrorString(last, sizeof last);
  std::string why = context;
  if (last[0] != '\0') why += std::string(why.empty() ? "" : "; ") + last;
  throw Error(detail::concat(call, where(device), cudnnGetErrorString(status), why.empty() ? "" : " (" + why + ")"));
}

void report_cuda_error(const char* call, cudaError_t status, int device) {
  if (status == cudaErrorCudartUnloading) return;  // process exit: the runtime is already gone
  (void)cudaGetLastError();
  std::fprintf(stderr, "dptrain: %s%s%s (%s)\n", call, where(device).c_str(), cudaGetErrorString(status),
               cudaGetErrorName(status));
}

std::string format_bytes(size_t nbytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(nbytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%zu B", nbytes);
  else std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  return buf;
}

}  // namespace dp::cuda
