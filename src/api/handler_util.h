// Small helpers shared by the handlers: body decoding and list paging.
#pragma once

#include "api/api.h"

namespace atrium::api {

// Parses the body as a JSON object ("{}" when empty).
Result<Json> BodyJson(const Context& ctx);
// limit (1..1000, default 100) and cursor from the query string.
Result<ListOptions> ListOptionsOf(const http::Request& req);
// Who made the request, for records a service audits itself.
RequestOrigin OriginOf(const Context& ctx);
// The scheduling service, or Unavailable when this server runs without one.
Result<scheduling::SchedulingService*> SchedulingOf(const Context& ctx);

// A point in time as the API accepts it: milliseconds since the epoch
// ("1790000000000") or RFC 3339 ("2026-09-21T14:00:00Z", with an optional
// fraction, of which milliseconds count, and Z or a ±HH:MM offset). Errors:
// kInvalidArgument naming `what`.
Result<int64_t> ParseTimestamp(std::string_view text, const std::string& what);
// The query parameter `name` as ParseTimestamp reads it; 0 when absent.
Result<int64_t> TimeQueryOf(const http::Request& req, const std::string& name);
// The query parameter `name`, "" when absent.
std::string QueryOf(const http::Request& req, const std::string& name);

}  // namespace atrium::api
