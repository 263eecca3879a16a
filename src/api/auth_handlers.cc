// Login, logout, whoami and signing-key rotation.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {

Result<http::Response> Login(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  std::string tenant = r.String("tenant", false, 63).value_or("");
  std::string username = r.String("username", true, 63).value_or("");
  std::string password = r.String("password", true, 1024).value_or("");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ctx.audit_actor = "login:" + (tenant.empty() ? std::string("platform") : tenant) + "/" + username;
  ctx.audit_target = "session";
  ATRIUM_ASSIGN_OR_RETURN(
      LoginResult result,
      ctx.services.identity->Login(tenant, username, password, ctx.request.remote_address));
  ctx.audit_actor = "user:" + result.user.id;
  ctx.audit_tenant = result.user.tenant_id;
  return JsonResponse(200, {{"access_token", result.access_token},
                            {"token_type", "Bearer"},
                            {"expires_at", FormatTimestamp(result.expires_at * 1000)},
                            {"user", UserView(result.user)}});
}

Result<http::Response> Logout(Context& ctx) {
  ATRIUM_RETURN_IF_ERROR(ctx.services.identity->Logout(*ctx.principal));
  http::Response r;
  r.status = 204;
  return r;
}

Result<http::Response> WhoAmI(Context& ctx) {
  const Principal& p = *ctx.principal;
  ATRIUM_ASSIGN_OR_RETURN(User u,
                          ctx.services.store->GetUser(TenantScope::Of(p.tenant_id), p.user_id));
  Json out = {{"user", UserView(u)},
              {"role", std::string(RoleName(p.role))},
              {"credential", p.credential},
              {"tenant", nullptr}};
  if (!p.is_platform()) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(p.tenant_id));
    out["tenant"] = TenantView(t);
  }
  return JsonResponse(200, out);
}

Result<http::Response> RotateSigningKey(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(std::string kid, ctx.services.identity->RotateSigningKey());
  ctx.audit_target = "signing-key/" + kid;
  return JsonResponse(200, {{"active_key_id", kid}});
}

}  // namespace atrium::api
