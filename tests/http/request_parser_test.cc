#include "http/request_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace atrium::http {
namespace {

TEST(ParseRequestTest, ParsesAGoodRequest) {
  auto request = ParseRequest(
      "post /v1/a%2Fb+c?x=1&y=a%20b&x=2&&z HTTP/1.1\r\nHost: h\r\nX-Thing: A\r\n"
      "x-thing: B\r\nContent-Length: 4\r\n\r\nbody",
      ServerOptions{});
  ASSERT_TRUE(request.has_value()) << request.error().message;
  EXPECT_EQ(request->method, "POST");
  EXPECT_EQ(request->target, "/v1/a%2Fb+c?x=1&y=a%20b&x=2&&z");
  EXPECT_EQ(request->path, "/v1/a/b+c");
  EXPECT_EQ(request->query.at("x"), "1");
  EXPECT_EQ(request->query.at("y"), "a b");
  EXPECT_EQ(request->query.at("z"), "");
  EXPECT_EQ(request->query_all.size(), 4u);
  EXPECT_EQ(request->Header("host"), "h");
  EXPECT_EQ(request->Header("x-thing"), "A, B");  // repeated fields form one list
  EXPECT_EQ(request->body, "body");
  EXPECT_TRUE(request->request_id.empty());
}

TEST(ParseRequestTest, DecodesAChunkedBody) {
  auto request = ParseRequest(
      "PUT /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
      ServerOptions{});
  ASSERT_TRUE(request.has_value()) << request.error().message;
  EXPECT_EQ(request->body, "abcde");
}

TEST(ParseRequestTest, TruncatedRequestIsInvalid) {
  for (const char* raw :
       {"", "GET / HTTP/1.1\r\nHost: h\r\n", "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort",
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"}) {
    auto request = ParseRequest(raw, ServerOptions{});
    ASSERT_FALSE(request.has_value()) << raw;
    EXPECT_EQ(request.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(request.error().message, "incomplete request");
  }
}

TEST(ParseRequestTest, BodyOverTheLimitIsPayloadTooLarge) {
  ServerOptions limits;
  limits.max_body_bytes = 3;
  auto request = ParseRequest("POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody", limits);
  ASSERT_FALSE(request.has_value());
  EXPECT_EQ(request.error().code, ErrorCode::kPayloadTooLarge);
  request = ParseRequest(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n",
      limits);
  ASSERT_FALSE(request.has_value());
  EXPECT_EQ(request.error().code, ErrorCode::kPayloadTooLarge);
}

TEST(ParseRequestTest, HeaderOverTheLimitIsInvalid) {
  ServerOptions limits;
  limits.max_header_bytes = 64;
  auto request =
      ParseRequest("GET / HTTP/1.1\r\nX-Long: " + std::string(100, 'a') + "\r\n\r\n", limits);
  ASSERT_FALSE(request.has_value());
  EXPECT_EQ(request.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(request.error().message, "request header fields too large");
}

TEST(ParseRequestTest, BadPercentEscapesAreInvalid) {
  for (const char* target : {"/a%zz", "/a%", "/a%4", "/x?q=%zz", "/x?%41%=1", "/a%00b"}) {
    auto request =
        ParseRequest(std::string("GET ") + target + " HTTP/1.1\r\n\r\n", ServerOptions{});
    ASSERT_FALSE(request.has_value()) << target;
    EXPECT_EQ(request.error().code, ErrorCode::kInvalidArgument) << target;
  }
}

TEST(ParseRequestTest, RejectsMalformedSyntax) {
  for (const char* raw :
       {"garbage\r\n\r\n", "GET / HTTP/9.9\r\n\r\n", "GET  / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nBad Header: x\r\n\r\n", "GET http://example.com/ HTTP/1.1\r\n\r\n",
        "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"}) {
    auto request = ParseRequest(raw, ServerOptions{});
    EXPECT_FALSE(request.has_value()) << raw;
  }
}

TEST(ParseRequestTest, IgnoresBytesAfterTheFirstRequest) {
  auto request =
      ParseRequest("GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\n", ServerOptions{});
  ASSERT_TRUE(request.has_value());
  EXPECT_EQ(request->path, "/one");
}

}  // namespace
}  // namespace atrium::http
