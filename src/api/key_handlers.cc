// API keys of a tenant (/tenants/{tenant_id}/keys) or of the platform
// (/platform/keys). The key text is in the create response only.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {

namespace {
constexpr int64_t kMaxKeyLifetimeS = 10LL * 365 * 24 * 3600;
}

Result<http::Response> CreateKey(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  NewApiKey req;
  req.name = r.String("name", true, 128).value_or("");
  req.owner_user_id = r.String("owner_user_id", false, 64).value_or("");
  req.role = r.String("role", false, 32).value_or("");
  req.scopes = r.StringList("scopes", false, 64, 128).value_or(std::vector<std::string>{});
  auto expires_in = r.Int("expires_in_seconds", false, 1, kMaxKeyLifetimeS);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  if (expires_in) req.expires_at = ctx.services.clock->NowMillis() + *expires_in * 1000;
  if (req.owner_user_id.empty() && ctx.principal->tenant_id != ctx.scope.tenant_id) {
    return Error::InvalidArgument(
        "owner_user_id is required: the caller is not a user of this tenant");
  }
  // A caller who may only manage their own keys creates keys for themselves.
  if (ctx.self_only && !req.owner_user_id.empty() && req.owner_user_id != ctx.principal->user_id) {
    return Error::PermissionDenied("you may only create keys for yourself");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto created,
                          ctx.services.identity->CreateApiKey(*ctx.principal, ctx.scope, req));
  ctx.audit_target += "/key/" + created.first.id;
  Json view = ApiKeyView(created.first, ctx.services.clock->NowMillis());
  view["key"] = created.second;
  return JsonResponse(201, view);
}

Result<http::Response> ListKeys(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  std::string owner;
  if (auto it = ctx.request.query.find("owner_user_id"); it != ctx.request.query.end()) {
    owner = it->second;
  }
  if (ctx.self_only) owner = ctx.principal->user_id;
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListApiKeys(ctx.scope, owner, opts));
  int64_t now = ctx.services.clock->NowMillis();
  return JsonResponse(200, PageView(page, [now](const ApiKey& k) { return ApiKeyView(k, now); }));
}

Result<http::Response> GetKey(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      ApiKey k, ctx.services.store->GetApiKey(ctx.scope, ctx.request.PathParam("key_id")));
  return JsonResponse(200, ApiKeyView(k, ctx.services.clock->NowMillis()));
}

Result<http::Response> RevokeKey(Context& ctx) {
  const std::string& id = ctx.request.PathParam("key_id");
  ATRIUM_RETURN_IF_ERROR(ctx.services.identity->RevokeApiKey(ctx.scope, id));
  ATRIUM_ASSIGN_OR_RETURN(ApiKey k, ctx.services.store->GetApiKey(ctx.scope, id));
  return JsonResponse(200, ApiKeyView(k, ctx.services.clock->NowMillis()));
}

}  // namespace atrium::api
