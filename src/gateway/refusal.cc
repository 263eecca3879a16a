#include "gateway/refusal.h"

#include <algorithm>

namespace atrium::gateway {
namespace {

constexpr const char* kInvalidRequest = "invalid_request_error";
constexpr const char* kServerError = "server_error";

std::string Str(std::string_view s) { return std::string(s); }

}  // namespace

Refusal Refusal::DuplicateAuthorization() {
  return {400, kInvalidRequest, "invalid_request", "more than one Authorization header"};
}

Refusal Refusal::MalformedRequest(std::string_view what) {
  return {400, kInvalidRequest, "invalid_request", "malformed HTTP request: " + Str(what)};
}

Refusal Refusal::MethodNotAllowed(std::string_view allowed, std::string_view path) {
  return {405, kInvalidRequest, "method_not_allowed", "use " + Str(allowed) + " for " + Str(path)};
}

Refusal Refusal::UnknownUrl(std::string_view method, std::string_view path) {
  return {404, kInvalidRequest, "unknown_url",
          "Unknown request URL: " + Str(method) + " " + Str(path)};
}

Refusal Refusal::RequestTimeout(int64_t timeout_ms) {
  return {408, kInvalidRequest, "request_timeout",
          "the request did not arrive within " + std::to_string(timeout_ms) + " ms"};
}

Refusal Refusal::BodyTooLarge(uint64_t max_body_bytes) {
  return {413, kInvalidRequest, "request_too_large",
          "request body is larger than " + std::to_string(max_body_bytes) + " bytes"};
}

Refusal Refusal::HeadersTooLarge() {
  return {431, kInvalidRequest, "headers_too_large", "request headers are too large"};
}

Refusal Refusal::BodyMemoryFull(int64_t total_bytes) {
  return Unavailable("the gateway holds as many request bodies in memory as it may (" +
                         std::to_string(total_bytes) + " bytes); retry shortly",
                     1000);
}

Refusal Refusal::PriorityNotAllowed() {
  return {403, kInvalidRequest, "priority_not_allowed",
          "X-Atrium-Priority interactive is above this API key's class (batch)"};
}

Refusal Refusal::InvalidPriority() {
  return {400, kInvalidRequest, "invalid_priority",
          "X-Atrium-Priority must be interactive or batch"};
}

Refusal Refusal::InvalidDeadline(int64_t max_ms) {
  return {400, kInvalidRequest, "invalid_deadline",
          "X-Atrium-Deadline-Ms must be 1.." + std::to_string(max_ms)};
}

Refusal Refusal::RateLimited(std::string reason, int64_t retry_after_ms) {
  return {429, "rate_limit_error", "rate_limit_exceeded", std::move(reason), retry_after_ms};
}

Refusal Refusal::BudgetExceeded(std::string reason) {
  return {429, "insufficient_quota", "budget_exceeded", std::move(reason), 0};
}

Refusal Refusal::Unavailable(std::string reason, int64_t retry_after_ms) {
  return {503, kServerError, "service_unavailable", std::move(reason), retry_after_ms};
}

Refusal Refusal::QueuedBodiesFull(int64_t per_tenant_bytes) {
  return RateLimited("too many request bytes of this tenant wait in the queue (at most " +
                         std::to_string(per_tenant_bytes) +
                         "); retry when fewer requests are waiting",
                     1000);
}

Refusal Refusal::QueueTimeout(int64_t waited_ms) {
  return {
      504, "timeout", "queue_timeout",
      "the request waited " + std::to_string(waited_ms) + " ms in the queue without being served"};
}

Refusal Refusal::UpstreamFailed(int status, int64_t first_byte_timeout_ms, int64_t retry_after_ms) {
  switch (status) {
    case 504:
      return {504, kServerError, "upstream_timeout",
              "the model's server did not answer within " + std::to_string(first_byte_timeout_ms) +
                  " ms",
              retry_after_ms};
    case 503:
      return {503, kServerError, "service_unavailable",
              "the model's server is overloaded (it answered 503); retry later",
              std::max<int64_t>(retry_after_ms, 1000)};
    case 502:
      return {502, kServerError, "upstream_error",
              "the model's server could not be reached or failed (502)", retry_after_ms};
    default:
      return {status, kServerError, "upstream_error",
              "the model's server answered " + std::to_string(status), retry_after_ms};
  }
}

Refusal Refusal::UpstreamBodyTimeout(int64_t body_timeout_ms) {
  return {504, kServerError, "upstream_timeout",
          "the model server's response did not arrive whole within " +
              std::to_string(body_timeout_ms) + " ms"};
}

Refusal Refusal::UpstreamBrokeOff() {
  return {502, kServerError, "upstream_error", "the model server's response broke off"};
}

Refusal Refusal::ShuttingDown() {
  return Unavailable("the gateway is stopping; retry the request", 1000);
}

Refusal Refusal::UsageUnavailable() {
  return {503, kServerError, "usage_unavailable",
          "the request's usage could not be recorded; retry later", 1000};
}

Refusal RefusalOf(const Error& error) {
  switch (error.code) {
    case ErrorCode::kUnauthenticated:
      return {401, kInvalidRequest, "invalid_api_key", error.message};
    case ErrorCode::kPermissionDenied:
      return {403, "permission_error", "permission_denied", error.message};
    case ErrorCode::kNotFound:
      return {404, kInvalidRequest, "model_not_found", error.message};
    case ErrorCode::kPayloadTooLarge:
      return {413, kInvalidRequest, "request_too_large", error.message};
    default:
      return {400, kInvalidRequest, "invalid_request", error.message};
  }
}

std::string RetryAfterHeader(const Refusal& refusal) {
  if (refusal.retry_after_ms <= 0) return "";
  return "Retry-After: " + std::to_string((refusal.retry_after_ms + 999) / 1000) + "\r\n";
}

}  // namespace atrium::gateway
