#include "comm/nccl/nccl_check.h"

namespace dp {

const char* nccl_result_name(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    case ncclNumResults: break;
  }
  return "unknown ncclResult_t";
}

std::string nccl_error_text(ncclResult_t result, ncclComm_t comm) {
  std::string text = detail::concat(ncclGetErrorString(result), " (", nccl_result_name(result));
  // NCCL's last error may describe an earlier failure; it is still the best detail there is.
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += detail::concat("; NCCL: ", last);
  return text + ")";
}

void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const char* call, const std::string& context) {
  std::string message = detail::concat(call, " failed: ", nccl_error_text(result, comm));
  if (!context.empty()) {
    message.pop_back();  // the closing parenthesis: the context goes inside it
    message += detail::concat("; ", context, ")");
  }
  throw Error(message);
}

}  // namespace dp
