#include "gateway/refusal.h"

#include <gtest/gtest.h>

namespace atrium::gateway {
namespace {

TEST(RefusalTest, MapsCoreErrorsToOpenAIStatusesAndCodes) {
  struct Case {
    Error error;
    int status;
    const char* type;
    const char* code;
  };
  const Case cases[] = {
      {Error::Unauthenticated("bad key"), 401, "invalid_request_error", "invalid_api_key"},
      {Error::PermissionDenied("suspended"), 403, "permission_error", "permission_denied"},
      {Error::NotFound("no such model"), 404, "invalid_request_error", "model_not_found"},
      {Error{ErrorCode::kPayloadTooLarge, "big"}, 413, "invalid_request_error",
       "request_too_large"},
      {Error::InvalidArgument("model must be a string"), 400, "invalid_request_error",
       "invalid_request"},
  };
  for (const Case& c : cases) {
    Refusal r = RefusalOf(c.error);
    EXPECT_EQ(r.status, c.status) << c.error.message;
    EXPECT_EQ(r.type, c.type) << c.error.message;
    EXPECT_EQ(r.code, c.code) << c.error.message;
    EXPECT_EQ(r.message, c.error.message);
    EXPECT_EQ(r.retry_after_ms, 0);
  }
}

TEST(RefusalTest, RetryAfterIsInWholeSecondsRoundedUp) {
  Refusal r{429, "rate_limit_error", "rate_limit_exceeded", "slow down"};
  EXPECT_EQ(RetryAfterHeader(r), "");
  r.retry_after_ms = 1;
  EXPECT_EQ(RetryAfterHeader(r), "Retry-After: 1\r\n");
  r.retry_after_ms = 1000;
  EXPECT_EQ(RetryAfterHeader(r), "Retry-After: 1\r\n");
  r.retry_after_ms = 1001;
  EXPECT_EQ(RetryAfterHeader(r), "Retry-After: 2\r\n");
}

}  // namespace
}  // namespace atrium::gateway
