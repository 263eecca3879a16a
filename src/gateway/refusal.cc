#include "gateway/refusal.h"

namespace atrium::gateway {

Refusal RefusalOf(const Error& error) {
  switch (error.code) {
    case ErrorCode::kUnauthenticated:
      return {401, "invalid_request_error", "invalid_api_key", error.message};
    case ErrorCode::kPermissionDenied:
      return {403, "permission_error", "permission_denied", error.message};
    case ErrorCode::kNotFound:
      return {404, "invalid_request_error", "model_not_found", error.message};
    case ErrorCode::kPayloadTooLarge:
      return {413, "invalid_request_error", "request_too_large", error.message};
    default:
      return {400, "invalid_request_error", "invalid_request", error.message};
  }
}

std::string RetryAfterHeader(const Refusal& refusal) {
  if (refusal.retry_after_ms <= 0) return "";
  return "Retry-After: " + std::to_string((refusal.retry_after_ms + 999) / 1000) + "\r\n";
}

}  // namespace atrium::gateway
