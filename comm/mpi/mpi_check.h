// Checking MPI return codes. Communicators we use have MPI_ERRORS_RETURN set, so a failing call
// returns its code instead of aborting the job, and check_mpi turns it into a dp::Error that
// names the call, the context and MPI's own description of the error.
#pragma once

#include <mpi.h>

#include <string>

#include "runtime/core/error.h"

namespace dp {

// "MPI_ERR_TRUNCATE: message truncated" (MPI's class and string for `code`).
std::string mpi_error_text(int code);

[[noreturn]] void throw_mpi_error(int code, const char* call, const std::string& context);

// check_mpi(MPI_Bcast(...), "MPI_Bcast", "broadcast seq ", seq, " on rank ", rank);
// The context is formatted only on failure.
template <typename... Context>
inline void check_mpi(int code, const char* call, Context&&... context) {
  if (code != MPI_SUCCESS) [[unlikely]] {
    if constexpr (sizeof...(Context) == 0) {
      throw_mpi_error(code, call, std::string());
    } else {
      throw_mpi_error(code, call, detail::concat(std::forward<Context>(context)...));
    }
  }
}

}  // namespace dp
