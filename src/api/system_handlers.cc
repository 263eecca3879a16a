// Health, readiness and the OpenAPI document.
#include "api/handlers.h"

namespace atrium::api {

Result<http::Response> Healthz(Context&) { return JsonResponse(200, {{"status", "ok"}}); }

Result<http::Response> Readyz(Context& ctx) {
  auto count = ctx.services.store->CountTenants();
  if (!count.has_value()) return Error::Unavailable("store unreachable: " + count.error().message);
  return JsonResponse(200, {{"status", "ready"}});
}

Result<http::Response> GetOpenApi(Context&) {
  http::Response r;
  r.body = OpenApiDocument();
  return r;
}

}  // namespace atrium::api
