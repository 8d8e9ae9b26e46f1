// EXPECT_ERROR_CONTAINS(statement, "text"): `statement` throws dp::Error and its message contains
// "text" (so a test checks that the error is the actionable one, not just any error).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/core/error.h"

namespace dp::testing {

// The message of the dp::Error that `fn` throws ("" when it throws none), for tests that check
// a whole message.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const ::dp::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dp::testing

#define EXPECT_ERROR_CONTAINS(statement, text)                                             \
  do {                                                                                     \
    try {                                                                                  \
      statement;                                                                           \
      ADD_FAILURE() << "expected dp::Error containing \"" << (text) << "\" from " #statement; \
    } catch (const ::dp::Error& error_) {                                                  \
      EXPECT_NE(std::string(error_.what()).find(text), std::string::npos)                  \
          << "message: " << error_.what();                                                 \
    }                                                                                      \
  } while (0)
