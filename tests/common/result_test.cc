#include "common/result.h"

#include <gtest/gtest.h>

namespace atrium {
namespace {

Result<int> Half(int v) {
  if (v % 2) return Error::InvalidArgument("odd");
  return v / 2;
}

Result<int> Quarter(int v) {
  ATRIUM_ASSIGN_OR_RETURN(int h, Half(v));
  return Half(h);
}

TEST(ResultTest, ValueAndErrorPropagate) {
  EXPECT_EQ(*Quarter(8), 2);
  auto r = Quarter(6);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
}

TEST(ResultTest, EveryCodeHasAStatus) {
  EXPECT_EQ(HttpStatusOf(ErrorCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(ErrorCode::kResourceExhausted), 429);
  EXPECT_EQ(WireNameOf(ErrorCode::kUnauthenticated), "unauthenticated");
  EXPECT_EQ(HttpStatusOf(ErrorCode::kUnavailable), 503);
}

}  // namespace
}  // namespace atrium
