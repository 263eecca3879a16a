// How a stage of the gateway's chain ends a request instead of relaying it:
// the OpenAI-shaped error its client receives (status, error type and code,
// message, and for a 429 or 503 when to come back).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace atrium::gateway {

struct Refusal {
  int status = 400;
  std::string type;  // OpenAI's error type, e.g. invalid_request_error, rate_limit_error
  std::string code;  // e.g. invalid_api_key, model_not_found, rate_limit_exceeded
  std::string message;
  int64_t retry_after_ms = 0;  // > 0: sent as a Retry-After header
};

// The refusal for an error of the pure cores (key verification, request
// validation, entitlement): 401 invalid_api_key, 403 permission_denied, 404
// model_not_found (an unknown model and one the caller may not use alike),
// 413 request_too_large, anything else 400 invalid_request.
Refusal RefusalOf(const Error& error);

// "Retry-After: <seconds, rounded up>\r\n", or "" when the refusal has none.
std::string RetryAfterHeader(const Refusal& refusal);

}  // namespace atrium::gateway
