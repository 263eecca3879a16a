// The route table: the single place where a path meets its permission.
// The isolation-matrix test enumerates this table, so a route added here is
// tested for every role and tenant boundary automatically.
#include "api/api.h"
#include "api/handlers.h"

namespace atrium::api {

ApiRouter BuildRoutes() {
  using P = Permission;
  using T = TargetKind;
  ApiRouter r;
  auto add = [&r](const char* method, const char* path, P perm, T target, const char* action,
                  HandlerFn fn, const char* summary, bool self_listable = false) {
    r.Add(method, path, RouteSpec{perm, target, action, std::move(fn), self_listable, summary});
  };

  add("GET", "/healthz", P::kNone, T::kPublic, "", Healthz, "Liveness");
  add("GET", "/readyz", P::kNone, T::kPublic, "", Readyz, "Readiness (store reachable)");
  add("GET", "/api/v1/openapi.json", P::kNone, T::kPublic, "", GetOpenApi, "This API's OpenAPI 3 document");

  add("POST", "/api/v1/auth/login", P::kNone, T::kPublic, "auth.login", Login,
      "Exchange a username and password for a short-lived access token");
  add("POST", "/api/v1/auth/logout", P::kSelfRead, T::kSelf, "auth.logout", Logout,
      "End the current login session");
  add("GET", "/api/v1/whoami", P::kSelfRead, T::kSelf, "", WhoAmI, "The caller's identity");
  add("POST", "/api/v1/auth/signing-keys/rotate", P::kSigningKeyRotate, T::kPlatformWide,
      "signing_key.rotate", RotateSigningKey,
      "Start signing access tokens with a new key (older tokens stay valid until they expire)");

  add("POST", "/api/v1/tenants", P::kTenantCreate, T::kPlatformWide, "tenant.create",
      CreateTenant, "Onboard a tenant");
  add("GET", "/api/v1/tenants", P::kTenantList, T::kPlatformWide, "", ListTenants,
      "List tenants (paginated; filter by state and label)");
  add("GET", "/api/v1/tenants/{tenant_id}", P::kTenantRead, T::kTenant, "", GetTenant,
      "Get a tenant");
  add("PATCH", "/api/v1/tenants/{tenant_id}", P::kTenantUpdate, T::kTenant, "tenant.update",
      UpdateTenant, "Update a tenant");
  add("POST", "/api/v1/tenants/{tenant_id}/suspend", P::kTenantSuspend, T::kTenant,
      "tenant.suspend", SuspendTenant, "Suspend a tenant: every credential rejected at once");
  add("POST", "/api/v1/tenants/{tenant_id}/resume", P::kTenantSuspend, T::kTenant,
      "tenant.resume", ResumeTenant, "Resume a suspended tenant");
  add("POST", "/api/v1/tenants/{tenant_id}/evict", P::kTenantEvict, T::kTenant, "tenant.evict",
      EvictTenant, "Evict a tenant: revoke credentials, then remove its data");

  for (bool platform : {false, true}) {
    std::string base = platform ? "/api/v1/platform" : "/api/v1/tenants/{tenant_id}";
    T coll = platform ? T::kPlatform : T::kTenant;
    T user = platform ? T::kPlatformUser : T::kTenantUser;
    T key = platform ? T::kPlatformKey : T::kTenantKey;
    std::string who = platform ? "platform staff" : "the tenant";
    auto path = [&](const char* suffix) { return base + suffix; };
    auto addp = [&](const char* method, std::string p, P perm, T target, const char* action,
                    HandlerFn fn, std::string summary, bool self_listable = false) {
      r.Add(method, std::move(p),
            RouteSpec{perm, target, action, std::move(fn), self_listable, std::move(summary)});
    };
    addp("POST", path("/users"), P::kUserCreate, coll, "user.create", CreateUser,
         "Create a user or service account of " + who);
    addp("GET", path("/users"), P::kUserRead, coll, "", ListUsers, "List users of " + who, true);
    addp("GET", path("/users/{user_id}"), P::kUserRead, user, "", GetUser, "Get a user");
    addp("PATCH", path("/users/{user_id}"), P::kUserUpdate, user, "user.update", UpdateUser,
         "Update a user (role, state, password, names)");
    addp("DELETE", path("/users/{user_id}"), P::kUserDelete, user, "user.delete", DeleteUser,
         "Delete a user with its keys and sessions");
    addp("POST", path("/keys"), P::kKeyCreate, coll, "key.create", CreateKey,
         "Create an API key (the key text is shown once)", true);
    addp("GET", path("/keys"), P::kKeyRead, coll, "", ListKeys, "List API keys of " + who, true);
    addp("GET", path("/keys/{key_id}"), P::kKeyRead, key, "", GetKey, "Get an API key");
    addp("POST", path("/keys/{key_id}/revoke"), P::kKeyRevoke, key, "key.revoke", RevokeKey,
         "Revoke an API key, effective at once");
  }

  add("GET", "/api/v1/tenants/{tenant_id}/audit", P::kAuditRead, T::kTenant, "", ListTenantAudit,
      "The tenant's audit trail (its own hash chain)");
  add("GET", "/api/v1/audit", P::kAuditRead, T::kPlatformWide, "", ListAllAudit,
      "The whole audit trail (operators)");
  return r;
}

}  // namespace atrium::api
