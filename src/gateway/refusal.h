// How a stage of the gateway's chain ends a request instead of relaying it:
// the OpenAI-shaped error its client receives (status, error type and code,
// message, and for a 429 or 503 when to come back).
//
// A Refusal is the gateway's one shape for "refused with a reason": a stage
// that may refuse returns std::optional<Refusal> (or std::variant<T, Refusal>
// when it also yields a value), and the session sends it with SendError. Every
// refusal the gateway makes is built by one of the named constructors below,
// so that what clients see is told in one place (tests/gateway/refusal_test.cc
// pins each one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace atrium::gateway {

struct Refusal {
  int status = 400;
  std::string type;  // OpenAI's error type, e.g. invalid_request_error, rate_limit_error
  std::string code;  // e.g. invalid_api_key, model_not_found, rate_limit_exceeded
  std::string message;
  int64_t retry_after_ms = 0;  // > 0: sent as a Retry-After header

  // --- The request as it arrived (session) ---
  // 400: a request with more than one Authorization header (which is meant?
  // proxies and servers disagree; none is guessed).
  static Refusal DuplicateAuthorization();
  // 400: bytes that are not an HTTP request; `what` is the parser's error.
  static Refusal MalformedRequest(std::string_view what);
  // 405: `path` is served for `allowed` ("POST", "GET") only.
  static Refusal MethodNotAllowed(std::string_view allowed, std::string_view path);
  // 404: a path the gateway does not serve (the control-plane API included).
  static Refusal UnknownUrl(std::string_view method, std::string_view path);
  // 408: part of a request came, the rest not within `timeout_ms`.
  static Refusal RequestTimeout(int64_t timeout_ms);
  // 413: a body over the gateway's `max_body_bytes`.
  static Refusal BodyTooLarge(uint64_t max_body_bytes);
  // 431: headers over the gateway's limit.
  static Refusal HeadersTooLarge();
  // 503, retry in 1 s: the BodyBudget holds `total_bytes` of bodies already.
  static Refusal BodyMemoryFull(int64_t total_bytes);

  // --- Request options (limit stage) ---
  // 403: X-Atrium-Priority interactive on a batch key.
  static Refusal PriorityNotAllowed();
  // 400: X-Atrium-Priority neither interactive nor batch.
  static Refusal InvalidPriority();
  // 400: X-Atrium-Deadline-Ms not within 1..max_ms.
  static Refusal InvalidDeadline(int64_t max_ms);

  // --- Queue stage ---
  // 429 rate_limit_exceeded: a limit (rate, tokens, concurrency, queue depth) says no.
  static Refusal RateLimited(std::string reason, int64_t retry_after_ms);
  // 429 budget_exceeded (type insufficient_quota, as OpenAI's quota
  // error): a hard budget has no room for the request's worst case.
  static Refusal BudgetExceeded(std::string reason);
  // 503 service_unavailable: nothing can serve the request now.
  static Refusal Unavailable(std::string reason, int64_t retry_after_ms);
  // 429, retry in 1 s: the tenant's queued bodies hold `per_tenant_bytes` already.
  static Refusal QueuedBodiesFull(int64_t per_tenant_bytes);
  // 504 queue_timeout: waited `waited_ms` (its deadline) without a grant.
  static Refusal QueueTimeout(int64_t waited_ms);

  // --- Route and relay stages ---
  // What a tenant is told when no model server answered its request: the
  // failure's status (502, 503, 504) and what it means, never the endpoint
  // (the operator's upstream URLs and addresses are not the tenant's to see;
  // the operator's log has them, with the request id). A 503 stays a 503
  // (clients retry it) with the server's Retry-After, at least 1 s.
  static Refusal UpstreamFailed(int status, int64_t first_byte_timeout_ms, int64_t retry_after_ms);
  // 504: a whole (not streamed) answer not read within `body_timeout_ms`.
  static Refusal UpstreamBodyTimeout(int64_t body_timeout_ms);
  // 502: the model server's answer broke off before its end.
  static Refusal UpstreamBrokeOff();
  // 503, retry in 1 s: cut off by Stop() once its drain time ran out.
  static Refusal ShuttingDown();
  // 503, retry in 1 s: a success whose usage record could not be journaled
  // is not shown to the client (nobody would be billed for it).
  static Refusal UsageUnavailable();
};

// The refusal for an error of the pure cores (key verification, request
// validation, entitlement): 401 invalid_api_key, 403 permission_denied, 404
// model_not_found (an unknown model and one the caller may not use alike),
// 413 request_too_large, anything else 400 invalid_request.
Refusal RefusalOf(const Error& error);

// "Retry-After: <seconds, rounded up>\r\n", or "" when the refusal has none.
std::string RetryAfterHeader(const Refusal& refusal);

}  // namespace atrium::gateway
