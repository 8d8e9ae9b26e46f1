// Errors that carry context: which op, which shapes, which config key.
// Every failed check throws dp::Error with a message a user can act on.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace dp

// DP_CHECK(cond, "conv2d: expected a 4-D input, got ", shape_str(x.shape()));
// The message parts are streamed only when the check fails.
#define DP_CHECK(cond, ...)                                        \
  do {                                                             \
    if (!(cond)) [[unlikely]] {                                    \
      throw ::dp::Error(::dp::detail::concat(__VA_ARGS__));        \
    }                                                              \
  } while (0)

// Internal invariant; the message names the file and line because it is our bug, not the user's.
#define DP_ASSERT(cond)                                                                      \
  do {                                                                                       \
    if (!(cond)) [[unlikely]] {                                                              \
      throw ::dp::Error(::dp::detail::concat("internal error at ", __FILE__, ":", __LINE__, \
                                             ": ", #cond));                                  \
    }                                                                                        \
  } while (0)
