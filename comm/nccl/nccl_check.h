// Checking NCCL return codes: a failure becomes a dp::Error that names the call, the context and
// NCCL's own words, e.g.
//   ncclCommInitRankConfig failed: unhandled system error (ncclSystemError; NCCL: socket
//   connect to 10.0.0.2 failed; NcclProcessGroup on rank 1 of 4: creating the communicator)
// Host code of comm/nccl/ only (includes nccl.h).
#pragma once

#include <nccl.h>

#include <string>

#include "runtime/core/error.h"

namespace dp {

// "ncclSystemError" (the enumerator's name; ncclGetErrorString gives the sentence).
const char* nccl_result_name(ncclResult_t result);

// "unhandled system error (ncclSystemError; NCCL: <ncclGetLastError text>)". `comm` may be null.
std::string nccl_error_text(ncclResult_t result, ncclComm_t comm);

[[noreturn]] void throw_nccl_error(ncclResult_t result, ncclComm_t comm, const char* call,
                                   const std::string& context);

// check_nccl(ncclAllReduce(...), comm, "ncclAllReduce", "all_reduce #", seq);
// ncclInProgress counts as failure here: callers of non-blocking communicators handle it first.
template <typename... Context>
inline void check_nccl(ncclResult_t result, ncclComm_t comm, const char* call, Context&&... context) {
  if (result != ncclSuccess) [[unlikely]] {
    if constexpr (sizeof...(Context) == 0) {
      throw_nccl_error(result, comm, call, std::string());
    } else {
      throw_nccl_error(result, comm, call, detail::concat(std::forward<Context>(context)...));
    }
  }
}

}  // namespace dp
