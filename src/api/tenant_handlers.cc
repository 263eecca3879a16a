// /api/v1/tenants: operators onboard and manage tenants.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {

Result<http::Response> CreateTenant(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  NewTenant req;
  req.name = r.String("name", true, 63).value_or("");
  req.display_name = r.String("display_name", false, 256).value_or("");
  req.tier = r.String("tier", false, 32).value_or("shared");
  req.regions = r.StringList("regions", false, 64, 63).value_or(std::vector<std::string>{});
  req.weight = r.Int("weight", false, 1, 10000).value_or(1);
  req.labels = r.StringMap("labels", false, 64, 255).value_or(std::map<std::string, std::string>{});
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Create(req));
  ctx.audit_target = "tenant/" + t.id;
  ctx.audit_tenant = t.id;
  return JsonResponse(201, TenantView(t));
}

Result<http::Response> ListTenants(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  if (auto it = ctx.request.query.find("name"); it != ctx.request.query.end()) {
    // Names are unique: the answer is a page of zero or one tenant.
    Page<Tenant> page;
    auto t = ctx.services.store->GetTenantByName(it->second);
    if (t.has_value()) {
      page.items.push_back(*t);
    } else if (t.error().code != ErrorCode::kNotFound) {
      return t.error();
    }
    return JsonResponse(200, PageView(page, TenantView));
  }
  TenantFilter filter;
  if (auto it = ctx.request.query.find("state"); it != ctx.request.query.end()) {
    filter.state = it->second;
  }
  if (auto it = ctx.request.query.find("label"); it != ctx.request.query.end()) {
    auto eq = it->second.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Error::InvalidArgument("label filter must look like key=value");
    }
    filter.label_key = it->second.substr(0, eq);
    filter.label_value = it->second.substr(eq + 1);
  }
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.tenants->List(filter, opts));
  return JsonResponse(200, PageView(page, TenantView));
}

Result<http::Response> GetTenant(Context& ctx) {
  if (ctx.tenant) return JsonResponse(200, TenantView(*ctx.tenant));
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Get(ctx.scope.tenant_id));
  return JsonResponse(200, TenantView(t));
}

Result<http::Response> UpdateTenant(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  TenantChanges changes;
  changes.display_name = r.String("display_name", false, 256);
  changes.tier = r.String("tier", false, 32);
  changes.regions = r.StringList("regions", false, 64, 63);
  changes.weight = r.Int("weight", false, 1, 10000);
  changes.labels = r.StringMap("labels", false, 64, 255);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Update(ctx.scope.tenant_id, changes));
  return JsonResponse(200, TenantView(t));
}

Result<http::Response> SuspendTenant(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Suspend(ctx.scope.tenant_id));
  return JsonResponse(200, TenantView(t));
}

Result<http::Response> ResumeTenant(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.tenants->Resume(ctx.scope.tenant_id));
  return JsonResponse(200, TenantView(t));
}

Result<http::Response> EvictTenant(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto summary, ctx.services.tenants->Evict(ctx.scope.tenant_id));
  return JsonResponse(
      200,
      {{"id", ctx.scope.tenant_id},
       {"state", "evicted"},
       {"removed",
        {{"users", summary.users}, {"api_keys", summary.api_keys}, {"sessions", summary.sessions}}},
       // Billing and accounting records outlive the
       // tenant; staff read them under its id.
       {"kept",
        {{"allocations", summary.allocations_kept},
         {"usage_records", summary.usage_records_kept}}}});
}

}  // namespace atrium::api
