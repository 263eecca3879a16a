// Small helpers shared by the handlers: body decoding and list paging.
#pragma once

#include "api/api.h"

namespace atrium::api {

// Parses the body as a JSON object ("{}" when empty).
Result<Json> BodyJson(const Context& ctx);
// limit (1..1000, default 100) and cursor from the query string.
Result<ListOptions> ListOptionsOf(const http::Request& req);

}  // namespace atrium::api
