// Assertions on atrium::Result / Status values, shared by every test.
#pragma once

#include <gtest/gtest.h>

#define ASSERT_OK(expr)                                                 \
  do {                                                                  \
    auto _r = (expr);                                                   \
    ASSERT_TRUE(_r.has_value()) << #expr << ": " << _r.error().message; \
  } while (0)

#define EXPECT_OK(expr)                                                 \
  do {                                                                  \
    auto _r = (expr);                                                   \
    EXPECT_TRUE(_r.has_value()) << #expr << ": " << _r.error().message; \
  } while (0)

// Expects `expr` to fail with `error_code`.
#define EXPECT_ERROR(expr, error_code)                                               \
  do {                                                                               \
    auto _r = (expr);                                                                \
    if (_r.has_value()) {                                                            \
      ADD_FAILURE() << #expr << " succeeded; expected " #error_code;                 \
    } else {                                                                         \
      EXPECT_EQ(_r.error().code, error_code) << #expr << ": " << _r.error().message; \
    }                                                                                \
  } while (0)
