#include "api/handler_util.h"

#include <charconv>
#include <string_view>

#include "common/clock.h"

namespace atrium::api {

Result<Json> BodyJson(const Context& ctx) {
  if (ctx.request.body.empty()) return Json::object();
  return ParseJson(ctx.request.body);
}

Result<ListOptions> ListOptionsOf(const http::Request& req) {
  ListOptions opts;
  if (auto it = req.query.find("limit"); it != req.query.end()) {
    int v = 0;
    auto [ptr, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || ptr != it->second.data() + it->second.size() || v < 1 || v > 1000) {
      return Error::InvalidArgument("query parameter 'limit' must be an integer from 1 to 1000");
    }
    opts.limit = v;
  }
  if (auto it = req.query.find("cursor"); it != req.query.end()) {
    if (it->second.size() > 128) return Error::InvalidArgument("cursor is too long");
    opts.after = it->second;
  }
  return opts;
}

RequestOrigin OriginOf(const Context& ctx) {
  RequestOrigin o;
  if (ctx.principal) {
    o.actor = ctx.principal->actor();
    o.actor_role = std::string(RoleName(ctx.principal->role));
  }
  o.request_id = ctx.request.request_id;
  o.source = ctx.request.remote_address;
  return o;
}

Result<scheduling::SchedulingService*> SchedulingOf(const Context& ctx) {
  if (ctx.services.scheduling == nullptr) {
    return Error::Unavailable("this server runs without a scheduler");
  }
  return ctx.services.scheduling;
}

Result<int64_t> TimeQueryOf(const http::Request& req, const std::string& name) {
  auto it = req.query.find(name);
  if (it == req.query.end()) return int64_t{0};
  return ParseTimestamp(it->second, "query parameter '" + name + "'");
}

std::string QueryOf(const http::Request& req, const std::string& name) {
  auto it = req.query.find(name);
  return it == req.query.end() ? "" : it->second;
}

}  // namespace atrium::api
