// EXPECT_ERROR_CONTAINS(statement, "text"): `statement` throws dp::Error and its message contains
// "text" (so a test checks that the error is the actionable one, not just any error).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/core/error.h"

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
