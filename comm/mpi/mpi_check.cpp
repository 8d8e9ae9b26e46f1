#include "comm/mpi/mpi_check.h"

namespace dp {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code) + " (MPI_Error_string could not describe it)";
  }
  std::string out(text, static_cast<size_t>(length));
  int error_class = code;
  char class_text[MPI_MAX_ERROR_STRING] = {};
  int class_length = 0;
  // Open MPI's strings for error classes lack the class name; prefix it when it differs.
  if (MPI_Error_class(code, &error_class) == MPI_SUCCESS && error_class != code &&
      MPI_Error_string(error_class, class_text, &class_length) == MPI_SUCCESS) {
    out = std::string(class_text, static_cast<size_t>(class_length)) + ": " + out;
  }
  return out;
}

void throw_mpi_error(int code, const char* call, const std::string& context) {
  throw Error(detail::concat(context, context.empty() ? "" : ": ", call, " failed: ",
                             mpi_error_text(code)));
}

}  // namespace dp
