#include "cli/api_session.h"

#include <gtest/gtest.h>

namespace atrium::cli {
namespace {

TEST(CliApiErrorOfTest, FormatsTheApiErrorBody) {
  Error e = ApiErrorOf(
      400, R"({"error":{"code":"invalid_argument","message":"name is bad","request_id":"req_1"}})",
      "req_header");
  EXPECT_EQ(e.code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.message, "name is bad (invalid_argument, HTTP 400, request req_1)");
}

TEST(CliApiErrorOfTest, FallsBackToStatusAndHeader) {
  Error e = ApiErrorOf(503, "<html>bad gateway</html>", "req_h");
  EXPECT_EQ(e.code, ErrorCode::kUnavailable);
  EXPECT_EQ(e.message, "the server answered HTTP 503 (unavailable, HTTP 503, request req_h)");
  Error bare = ApiErrorOf(418, "", "");
  EXPECT_EQ(bare.code, ErrorCode::kInternal);
  EXPECT_EQ(bare.message, "the server answered HTTP 418 (internal, HTTP 418)");
}

TEST(CliErrorCodeOfWireNameTest, InvertsWireNameOf) {
  for (int i = static_cast<int>(ErrorCode::kInvalidArgument);
       i <= static_cast<int>(ErrorCode::kUnavailable); ++i) {
    auto code = static_cast<ErrorCode>(i);
    EXPECT_EQ(ErrorCodeOfWireName(WireNameOf(code)), code) << WireNameOf(code);
  }
  EXPECT_EQ(ErrorCodeOfWireName("no_such_code"), ErrorCode::kInternal);
}

TEST(CliApiSessionTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there in a test sandbox.
  auto api = ApiSession::Open("http://127.0.0.1:1", "t", 2000);
  ASSERT_TRUE(api.has_value());
  auto answer = (*api)->Get("/api/v1/whoami");
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(answer.error().message.find("cannot reach http://127.0.0.1:1"), std::string::npos);
  EXPECT_FALSE(ApiSession::Open("ftp://x", "t").has_value());
}

}  // namespace
}  // namespace atrium::cli
