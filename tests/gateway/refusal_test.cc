#include "gateway/refusal.h"

#include <gtest/gtest.h>

#include "gateway/openai.h"

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

// What clients see today for each refusal the gateway makes, written out in
// full: the status, the OpenAI error body (type, code, message) and the
// Retry-After header. A change here is a change to the gateway's API.
TEST(RefusalTest, EachNamedRefusalIsWhatClientsSee) {
  struct Case {
    const char* name;
    Refusal refusal;
    int status;
    const char* body;
    const char* retry_after;
  };
  const Case cases[] = {
      {"DuplicateAuthorization", Refusal::DuplicateAuthorization(), 400,
       R"json({"error":{"message":"more than one Authorization header","type":"invalid_request_error","param":null,"code":"invalid_request"}})json",
       ""},
      {"MalformedRequest", Refusal::MalformedRequest("bad method"), 400,
       R"json({"error":{"message":"malformed HTTP request: bad method","type":"invalid_request_error","param":null,"code":"invalid_request"}})json",
       ""},
      {"MethodNotAllowed", Refusal::MethodNotAllowed("POST", "/v1/embeddings"), 405,
       R"json({"error":{"message":"use POST for /v1/embeddings","type":"invalid_request_error","param":null,"code":"method_not_allowed"}})json",
       ""},
      {"UnknownUrl", Refusal::UnknownUrl("GET", "/v1/tenants"), 404,
       R"json({"error":{"message":"Unknown request URL: GET /v1/tenants","type":"invalid_request_error","param":null,"code":"unknown_url"}})json",
       ""},
      {"RequestTimeout", Refusal::RequestTimeout(30000), 408,
       R"json({"error":{"message":"the request did not arrive within 30000 ms","type":"invalid_request_error","param":null,"code":"request_timeout"}})json",
       ""},
      {"BodyTooLarge", Refusal::BodyTooLarge(4194304), 413,
       R"json({"error":{"message":"request body is larger than 4194304 bytes","type":"invalid_request_error","param":null,"code":"request_too_large"}})json",
       ""},
      {"HeadersTooLarge", Refusal::HeadersTooLarge(), 431,
       R"json({"error":{"message":"request headers are too large","type":"invalid_request_error","param":null,"code":"headers_too_large"}})json",
       ""},
      {"BodyMemoryFull", Refusal::BodyMemoryFull(268435456), 503,
       R"json({"error":{"message":"the gateway holds as many request bodies in memory as it may (268435456 bytes); retry shortly","type":"server_error","param":null,"code":"service_unavailable"}})json",
       "Retry-After: 1\r\n"},
      {"PriorityNotAllowed", Refusal::PriorityNotAllowed(), 403,
       R"json({"error":{"message":"X-Atrium-Priority interactive is above this API key's class (batch)","type":"invalid_request_error","param":null,"code":"priority_not_allowed"}})json",
       ""},
      {"InvalidPriority", Refusal::InvalidPriority(), 400,
       R"json({"error":{"message":"X-Atrium-Priority must be interactive or batch","type":"invalid_request_error","param":null,"code":"invalid_priority"}})json",
       ""},
      {"InvalidDeadline", Refusal::InvalidDeadline(600000), 400,
       R"json({"error":{"message":"X-Atrium-Deadline-Ms must be 1..600000","type":"invalid_request_error","param":null,"code":"invalid_deadline"}})json",
       ""},
      {"RateLimited", Refusal::RateLimited("tokens per minute exhausted", 2500), 429,
       R"json({"error":{"message":"tokens per minute exhausted","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}})json",
       "Retry-After: 3\r\n"},
      {"Unavailable", Refusal::Unavailable("every endpoint of the model's deployment is down", 0),
       503,
       R"json({"error":{"message":"every endpoint of the model's deployment is down","type":"server_error","param":null,"code":"service_unavailable"}})json",
       ""},
      {"QueuedBodiesFull", Refusal::QueuedBodiesFull(67108864), 429,
       R"json({"error":{"message":"too many request bytes of this tenant wait in the queue (at most 67108864); retry when fewer requests are waiting","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}})json",
       "Retry-After: 1\r\n"},
      {"QueueTimeout", Refusal::QueueTimeout(60000), 504,
       R"json({"error":{"message":"the request waited 60000 ms in the queue without being served","type":"timeout","param":null,"code":"queue_timeout"}})json",
       ""},
      {"UpstreamFailed 502", Refusal::UpstreamFailed(502, 120000, 0), 502,
       R"json({"error":{"message":"the model's server could not be reached or failed (502)","type":"server_error","param":null,"code":"upstream_error"}})json",
       ""},
      {"UpstreamFailed 503", Refusal::UpstreamFailed(503, 120000, 0), 503,
       R"json({"error":{"message":"the model's server is overloaded (it answered 503); retry later","type":"server_error","param":null,"code":"service_unavailable"}})json",
       "Retry-After: 1\r\n"},
      {"UpstreamFailed 503 with the server's Retry-After",
       Refusal::UpstreamFailed(503, 120000, 7000), 503,
       R"json({"error":{"message":"the model's server is overloaded (it answered 503); retry later","type":"server_error","param":null,"code":"service_unavailable"}})json",
       "Retry-After: 7\r\n"},
      {"UpstreamFailed 504", Refusal::UpstreamFailed(504, 120000, 0), 504,
       R"json({"error":{"message":"the model's server did not answer within 120000 ms","type":"server_error","param":null,"code":"upstream_timeout"}})json",
       ""},
      {"UpstreamBodyTimeout", Refusal::UpstreamBodyTimeout(300000), 504,
       R"json({"error":{"message":"the model server's response did not arrive whole within 300000 ms","type":"server_error","param":null,"code":"upstream_timeout"}})json",
       ""},
      {"UpstreamBrokeOff", Refusal::UpstreamBrokeOff(), 502,
       R"json({"error":{"message":"the model server's response broke off","type":"server_error","param":null,"code":"upstream_error"}})json",
       ""},
      {"ShuttingDown", Refusal::ShuttingDown(), 503,
       R"json({"error":{"message":"the gateway is stopping; retry the request","type":"server_error","param":null,"code":"service_unavailable"}})json",
       "Retry-After: 1\r\n"},
      {"UsageUnavailable", Refusal::UsageUnavailable(), 503,
       R"json({"error":{"message":"the request's usage could not be recorded; retry later","type":"server_error","param":null,"code":"usage_unavailable"}})json",
       "Retry-After: 1\r\n"},
  };
  for (const Case& c : cases) {
    const Refusal& r = c.refusal;
    EXPECT_EQ(r.status, c.status) << c.name;
    EXPECT_EQ(ErrorBody(r.message, r.type, r.code), c.body) << c.name;
    EXPECT_EQ(RetryAfterHeader(r), c.retry_after) << c.name;
  }
}

}  // namespace
}  // namespace atrium::gateway
