// A tenant's side of the inference gateway: which models it may call
// (entitlements, granted by platform staff), its request and token limits
// (the tenant-wide row is the operator's; a tenant admin narrows its keys),
// and what it used (usage records and totals, each tenant its own).
#include "api/gateway_validation.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {
namespace {

// --- limits

constexpr int64_t kMaxRequestsPerMinute = 1'000'000'000;
constexpr int64_t kMaxTokensPerMinute = 1'000'000'000'000;
constexpr int64_t kMaxConcurrent = 1'000'000;
constexpr int64_t kMaxQueued = 1'000'000;

struct LimitField {
  const char* name;
  int64_t max;
  int64_t GatewayLimits::*member;
};
constexpr LimitField kLimitFields[] = {
    {"requests_per_minute", kMaxRequestsPerMinute, &GatewayLimits::requests_per_minute},
    {"tokens_per_minute", kMaxTokensPerMinute, &GatewayLimits::tokens_per_minute},
    {"max_concurrent", kMaxConcurrent, &GatewayLimits::max_concurrent},
    {"max_queued", kMaxQueued, &GatewayLimits::max_queued},
};

// The four limits (required: a PUT replaces the row; 0 = no limit), and
// for a key the optional priority.
Result<GatewayLimitRecord> LimitOf(Context& ctx, bool key_level) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  GatewayLimitRecord row;
  for (const auto& f : kLimitFields) {
    row.limits.*f.member = r.Int(f.name, true, 0, f.max).value_or(0);
  }
  std::optional<std::string> priority;
  if (key_level) priority = r.String("priority", false, 16);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  if (priority && !priority->empty() && *priority != "interactive" && *priority != "batch") {
    return Error::InvalidArgument("priority must be interactive or batch");
  }
  row.priority = priority.value_or("");
  row.tenant_id = ctx.scope.tenant_id;
  row.updated_at = ctx.services.clock->NowMillis();
  return row;
}

// The tenant's rows for the API: the tenant-wide row first, always present
// (all zeros when none is stored), then each key's.
Result<http::Response> LimitList(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, ctx.services.store->ListGatewayLimits(ctx.scope));
  Json items = Json::array();
  if (rows.empty() || !rows.front().key_id.empty()) {
    GatewayLimitRecord none;
    none.tenant_id = ctx.scope.tenant_id;
    items.push_back(GatewayLimitView(none));
  }
  for (const auto& row : rows) items.push_back(GatewayLimitView(row));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id}, {"items", items}});
}

// --- usage

// The filter's text is compared, never stored: this bound only keeps a
// hostile query from costing more than a plain one.
constexpr size_t kMaxDeploymentFilter = 200;

Result<UsageFilter> UsageFilterOf(const Context& ctx) {
  UsageFilter f;
  ATRIUM_ASSIGN_OR_RETURN(f.from, TimeQueryOf(ctx.request, "from"));
  ATRIUM_ASSIGN_OR_RETURN(f.to, TimeQueryOf(ctx.request, "to"));
  if (f.from != 0 && f.to != 0 && f.to <= f.from) {
    return Error::InvalidArgument("'to' must be after 'from'");
  }
  f.model = QueryOf(ctx.request, "model");
  f.key_id = QueryOf(ctx.request, "key_id");
  f.deployment_id = QueryOf(ctx.request, "deployment");
  if (f.deployment_id.size() > kMaxDeploymentFilter) {
    return Error::InvalidArgument("'deployment' is at most " +
                                  std::to_string(kMaxDeploymentFilter) + " characters");
  }
  return f;
}

Json TimeOrNull(int64_t ms) { return ms == 0 ? Json(nullptr) : Json(FormatTimestamp(ms)); }

}  // namespace

// ---------------------------------------------------------------- entitlements

Result<http::Response> ListEntitlements(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, ctx.services.store->ListEntitlements(ctx.scope));
  Json items = Json::array();
  for (const auto& e : rows) items.push_back(EntitlementView(e));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id}, {"items", items}});
}

Result<http::Response> GrantEntitlement(Context& ctx) {
  const std::string& model = ctx.request.PathParam("model");
  ctx.audit_target += "/entitlement/" + model;
  ATRIUM_RETURN_IF_ERROR(ValidateModelName(model, "the model name"));
  ATRIUM_ASSIGN_OR_RETURN(auto e, ctx.services.store->GrantEntitlement(
                                      ctx.scope, model, ctx.services.clock->NowMillis()));
  return JsonResponse(200, EntitlementView(e));
}

Result<http::Response> RevokeEntitlement(Context& ctx) {
  const std::string& model = ctx.request.PathParam("model");
  ctx.audit_target += "/entitlement/" + model;
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->RevokeEntitlement(ctx.scope, model));
  http::Response r;
  r.status = 204;
  return r;
}

// ---------------------------------------------------------------- gateway limits

Result<http::Response> GetGatewayLimits(Context& ctx) { return LimitList(ctx); }

Result<http::Response> SetTenantGatewayLimits(Context& ctx) {
  // The permission table lets tenant admins set limits so that they can
  // narrow their keys; the tenant-wide ceiling is the operator's.
  if (!ctx.principal->is_platform()) {
    return Error::PermissionDenied(
        "only platform staff set a tenant's own limits; tenant admins set limits per key "
        "(PUT .../keys/{key_id}/gateway-limits)");
  }
  ATRIUM_ASSIGN_OR_RETURN(GatewayLimitRecord row, LimitOf(ctx, /*key_level=*/false));
  ctx.audit_target += "/gateway-limits";
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->SetGatewayLimit(ctx.scope, row));
  return LimitList(ctx);
}

Result<http::Response> SetKeyGatewayLimits(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(GatewayLimitRecord row, LimitOf(ctx, /*key_level=*/true));
  row.key_id = ctx.request.PathParam("key_id");
  ctx.audit_target += "/gateway-limits";
  // A key only narrows its tenant: where the tenant has a limit, the key's
  // must not be above it (0, no limit of the key's own, leaves the tenant's
  // in force).
  auto tenant = ctx.services.store->GetGatewayLimit(ctx.scope, "");
  if (!tenant.has_value() && tenant.error().code != ErrorCode::kNotFound) return tenant.error();
  if (tenant.has_value()) {
    for (const auto& f : kLimitFields) {
      int64_t cap = tenant->limits.*f.member;
      int64_t want = row.limits.*f.member;
      if (cap != 0 && want > cap) {
        return Error::InvalidArgument(std::string(f.name) + " " + std::to_string(want) +
                                      " is above the tenant's limit of " + std::to_string(cap) +
                                      ": a key's limits only narrow its tenant's");
      }
    }
  }
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->SetGatewayLimit(ctx.scope, row));
  return LimitList(ctx);
}

// ---------------------------------------------------------------- usage

Result<http::Response> ListUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  ATRIUM_ASSIGN_OR_RETURN(UsageFilter filter, UsageFilterOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListUsage(ctx.scope, filter, opts));
  // Upstream URLs are the operator's servers: platform staff see them.
  const bool with_endpoint = ctx.principal->is_platform();
  return JsonResponse(200, PageView(page, [with_endpoint](const UsageRecord& u) {
                        return UsageView(u, with_endpoint);
                      }));
}

Result<http::Response> SummarizeUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(UsageFilter filter, UsageFilterOf(ctx));
  std::string group_by = QueryOf(ctx.request, "group_by");
  if (!group_by.empty() && group_by != "model" && group_by != "key" && group_by != "deployment") {
    return Error::InvalidArgument("group_by must be model, key or deployment");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto totals,
                          ctx.services.store->SummarizeUsage(ctx.scope, filter, group_by));
  Json items = Json::array();
  for (const auto& t : totals) items.push_back(UsageTotalsView(t));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id},
                            {"group_by", group_by.empty() ? Json(nullptr) : Json(group_by)},
                            {"from", TimeOrNull(filter.from)},
                            {"to", TimeOrNull(filter.to)},
                            {"items", items}});
}

Result<http::Response> SummarizeRefusals(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(UsageFilter filter, UsageFilterOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto totals,
                          ctx.services.store->SummarizeGatewayRefusals(ctx.scope, filter));
  Json items = Json::array();
  for (const auto& t : totals) items.push_back(RefusalTotalsView(t));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id},
                            {"from", TimeOrNull(filter.from)},
                            {"to", TimeOrNull(filter.to)},
                            {"items", items}});
}

}  // namespace atrium::api
