// Users and service accounts of a tenant (/tenants/{tenant_id}/users) or of
// the platform (/platform/users). The scope comes from ctx, never the body.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {

Result<http::Response> CreateUser(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  NewUser req;
  req.username = r.String("username", true, 63).value_or("");
  req.display_name = r.String("display_name", false, 256).value_or("");
  req.email = r.String("email", false, 256).value_or("");
  req.role = r.String("role", true, 32).value_or("");
  req.kind = r.String("kind", false, 16).value_or("human");
  req.password = r.String("password", false, 1024).value_or("");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(User u,
                          ctx.services.identity->CreateUser(*ctx.principal, ctx.scope, req));
  ctx.audit_target += "/user/" + u.id;
  return JsonResponse(201, UserView(u));
}

Result<http::Response> ListUsers(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  if (auto it = ctx.request.query.find("username"); it != ctx.request.query.end()) {
    // Usernames are unique in a scope: a page of zero or one user. A caller
    // who may read only itself finds nobody else.
    Page<User> page;
    auto u = ctx.services.store->GetUserByName(ctx.scope, it->second);
    if (u.has_value()) {
      if (!ctx.self_only || u->id == ctx.principal->user_id) page.items.push_back(*u);
    } else if (u.error().code != ErrorCode::kNotFound) {
      return u.error();
    }
    return JsonResponse(200, PageView(page, UserView));
  }
  if (ctx.self_only) {
    ATRIUM_ASSIGN_OR_RETURN(User u, ctx.services.store->GetUser(ctx.scope, ctx.principal->user_id));
    return JsonResponse(200, PageView(Page<User>{{u}, ""}, UserView));
  }
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListUsers(ctx.scope, opts));
  return JsonResponse(200, PageView(page, UserView));
}

Result<http::Response> GetUser(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(User u,
                          ctx.services.store->GetUser(ctx.scope, ctx.request.PathParam("user_id")));
  return JsonResponse(200, UserView(u));
}

Result<http::Response> UpdateUser(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  UserChanges changes;
  changes.display_name = r.String("display_name", false, 256);
  changes.email = r.String("email", false, 256);
  changes.role = r.String("role", false, 32);
  changes.state = r.String("state", false, 16);
  changes.password = r.String("password", false, 1024);
  changes.current_password = r.String("current_password", false, 1024);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(
      User u, ctx.services.identity->UpdateUser(*ctx.principal, ctx.scope,
                                                ctx.request.PathParam("user_id"), changes));
  return JsonResponse(200, UserView(u));
}

Result<http::Response> DeleteUser(Context& ctx) {
  const std::string& id = ctx.request.PathParam("user_id");
  if (id == ctx.principal->user_id) return Error::FailedPrecondition("cannot delete yourself");
  ATRIUM_RETURN_IF_ERROR(ctx.services.identity->DeleteUser(ctx.scope, id));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
