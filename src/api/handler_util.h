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

// The query parameter `name` as ParseTimestamp (common/clock.h) reads it; 0
// when absent.
Result<int64_t> TimeQueryOf(const http::Request& req, const std::string& name);
// The query parameter `name`, "" when absent.
std::string QueryOf(const http::Request& req, const std::string& name);

}  // namespace atrium::api
