// /api/v1/deployments: the models the gateway serves and where they run.
// Platform staff manage shared deployments (every entitled tenant uses them)
// and may place a dedicated one for a tenant; a tenant admin manages its own
// tenant's dedicated deployments. Tenants see their dedicated deployments
// and the shared ones of models they are entitled to, without the shared
// ones' endpoint URLs (the operator's servers). A dedicated deployment's
// endpoints must pass the operator's egress policy, and where the operator
// requires it the tenant must be entitled to its model.
#include <algorithm>
#include <set>

#include "api/gateway_validation.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "crypto/ids.h"

namespace atrium::api {
namespace {

// Whether the caller sees the endpoint URLs of `d`: platform staff always,
// a tenant on its own dedicated deployments.
bool ShowsEndpoints(const Context& ctx, const DeploymentRecord& d) {
  return ctx.principal->is_platform() || d.tenant_id == ctx.principal->tenant_id;
}

std::string AuditTargetOf(const DeploymentRecord& d) {
  return (d.tenant_id.empty() ? std::string("platform") : "tenant/" + d.tenant_id) +
         "/deployment/" + d.id;
}

// The fields both create and update take. Each is nullopt when absent.
struct DeploymentFields {
  std::optional<std::string> model;
  std::optional<std::string> version;
  std::optional<std::vector<DeploymentEndpoint>> endpoints;
  std::optional<std::string> region;
  std::optional<std::string> latency_tier;
};

// Reads and validates the common fields; `required` for create.
Result<DeploymentFields> FieldsOf(const Json& body, JsonObjectReader& r, bool required) {
  DeploymentFields f;
  f.model = r.String("model", required, kMaxModelNameBytes);
  f.version = r.String("version", false, 64);
  f.region = r.String("region", required, 63);
  f.latency_tier = r.String("latency_tier", false, 16);
  ATRIUM_ASSIGN_OR_RETURN(f.endpoints, EndpointsOf(body, r, required));
  return f;
}

Status Validate(const DeploymentFields& f) {
  if (f.model) ATRIUM_RETURN_IF_ERROR(ValidateModelName(*f.model, "model"));
  if (f.version && !IsPrintableAscii(*f.version, /*allow_space=*/true)) {
    return Error::InvalidArgument("version must be printable ASCII");
  }
  if (f.region && (f.region->empty() || !IsPrintableAscii(*f.region, false))) {
    return Error::InvalidArgument("region must be 1-63 printable characters without spaces");
  }
  if (f.latency_tier && *f.latency_tier != "interactive" && *f.latency_tier != "standard" &&
      *f.latency_tier != "batch") {
    return Error::InvalidArgument("latency_tier must be interactive, standard or batch");
  }
  return OkStatus();
}

// Data residency: a tenant's own deployment stands in one of its regions
// (the gateway would never route its requests to one elsewhere).
Status CheckResidency(const Tenant& tenant, const std::string& region) {
  if (tenant.regions.empty() ||
      std::find(tenant.regions.begin(), tenant.regions.end(), region) != tenant.regions.end()) {
    return OkStatus();
  }
  std::string allowed;
  for (const std::string& r : tenant.regions) allowed += (allowed.empty() ? "" : ", ") + r;
  return Error::InvalidArgument("region " + region + " is outside the tenant's regions (" +
                                allowed + "): its data may not go there");
}

// A dedicated deployment's endpoints are the tenant's to choose, and the
// gateway sends the tenant's requests there: each must pass the operator's
// egress policy (gateway/egress_policy.h; the gateway checks the addresses a
// name resolves to again when it connects). Every shared deployment's
// endpoint is refused among them, so this reads every deployment
// (unscoped: for the check only, nothing of it is answered).
Status CheckEgress(const Context& ctx, const std::vector<DeploymentEndpoint>& endpoints) {
  static const gateway::EgressPolicy kDefaultPolicy;
  const gateway::EgressPolicy& policy =
      ctx.services.egress != nullptr ? *ctx.services.egress : kDefaultPolicy;
  std::vector<gateway::HostPort> shared;
  ListOptions opts;
  opts.limit = 1000;
  for (;;) {
    ATRIUM_ASSIGN_OR_RETURN(Page<DeploymentRecord> page,
                            ctx.services.store->ListDeploymentsForPlatform({}, opts));
    std::vector<gateway::HostPort> page_shared = gateway::SharedEndpointsOf(page.items);
    shared.insert(shared.end(), std::make_move_iterator(page_shared.begin()),
                  std::make_move_iterator(page_shared.end()));
    if (page.next_cursor.empty()) break;
    opts.after = page.next_cursor;
  }
  const gateway::EgressFacts facts = policy.Facts(std::move(shared));
  for (const DeploymentEndpoint& e : endpoints) {
    gateway::EgressVerdict verdict = gateway::CheckEndpointUrl(policy.rules(), facts, e.url);
    if (!verdict.allowed) {
      return Error::PermissionDenied(
          "endpoint URL '" + e.url +
          "' is refused by the operator's egress policy: " + verdict.rule);
    }
  }
  return OkStatus();
}

// Where the operator requires it, a dedicated deployment is of a model its
// tenant is entitled to (as a shared one's users are).
Status CheckEntitlement(const Context& ctx, const std::string& tenant_id,
                        const std::string& model) {
  if (!ctx.services.dedicated_requires_entitlement) return OkStatus();
  ATRIUM_ASSIGN_OR_RETURN(std::vector<EntitlementRecord> entitlements,
                          ctx.services.store->ListEntitlements(TenantScope::Of(tenant_id)));
  for (const EntitlementRecord& e : entitlements) {
    if (e.model == model) return OkStatus();
  }
  return Error::PermissionDenied("the tenant is not entitled to model " + model +
                                 ", and the operator requires an entitlement for a dedicated "
                                 "deployment of a model");
}

// The checks a dedicated deployment `d` (as it will be stored) passes.
Status CheckDedicated(const Context& ctx, const DeploymentRecord& d) {
  if (d.visibility != "dedicated") return OkStatus();
  ATRIUM_RETURN_IF_ERROR(CheckEntitlement(ctx, d.tenant_id, d.model));
  return CheckEgress(ctx, d.endpoints);
}

void Apply(const DeploymentFields& f, DeploymentRecord& d) {
  if (f.model) d.model = *f.model;
  if (f.version) d.version = *f.version;
  if (f.endpoints) d.endpoints = *f.endpoints;
  if (f.region) d.region = *f.region;
  if (f.latency_tier) d.latency_tier = *f.latency_tier;
}

}  // namespace

Result<http::Response> CreateDeployment(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto visibility = r.String("visibility", false, 16);
  auto named_tenant = r.String("tenant_id", false, 64);
  ATRIUM_ASSIGN_OR_RETURN(DeploymentFields fields, FieldsOf(body, r, /*required=*/true));
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(Validate(fields));
  if (visibility && *visibility != "shared" && *visibility != "dedicated") {
    return Error::InvalidArgument("visibility must be shared or dedicated");
  }

  DeploymentRecord d;
  const Principal& p = *ctx.principal;
  if (p.is_platform()) {
    // Platform staff: shared unless they name the tenant it is dedicated to.
    std::string tenant = named_tenant.value_or("");
    std::string vis = visibility.value_or(tenant.empty() ? "shared" : "dedicated");
    if (vis == "shared" && !tenant.empty()) {
      return Error::InvalidArgument("a shared deployment belongs to no tenant: omit tenant_id");
    }
    if (vis == "dedicated" && tenant.empty()) {
      return Error::InvalidArgument("a dedicated deployment needs the tenant_id it is for");
    }
    if (!tenant.empty()) {
      ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(tenant));
      ATRIUM_RETURN_IF_ERROR(CheckResidency(t, *fields.region));
      ctx.scope = TenantScope::Of(t.id);
    } else {
      ctx.scope = TenantScope::Platform();
    }
    d.visibility = vis;
    d.tenant_id = tenant;
  } else {
    // A tenant admin places deployments for its own tenant only; the body
    // may repeat that tenant, any other answers like one that does not exist.
    if (named_tenant && !named_tenant->empty() && *named_tenant != p.tenant_id) {
      return Error::NotFound("tenant not found");
    }
    if (visibility.value_or("dedicated") != "dedicated") {
      return Error::PermissionDenied(
          "only platform staff create shared deployments; a tenant's are dedicated");
    }
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(p.tenant_id));
    ATRIUM_RETURN_IF_ERROR(CheckResidency(t, *fields.region));
    d.visibility = "dedicated";
    d.tenant_id = p.tenant_id;
    ctx.scope = TenantScope::Of(p.tenant_id);
  }
  int64_t now = ctx.services.clock->NowMillis();
  d.id = NewId("dep", *ctx.services.clock);
  d.latency_tier = "standard";
  Apply(fields, d);
  d.created_at = d.updated_at = now;
  ctx.audit_target = AuditTargetOf(d);
  ATRIUM_RETURN_IF_ERROR(CheckDedicated(ctx, d));
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->CreateDeployment(d));
  return JsonResponse(201, DeploymentView(d, true));
}

Result<http::Response> ListDeployments(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  DeploymentFilter filter;
  filter.model = QueryOf(ctx.request, "model");
  std::string tenant = QueryOf(ctx.request, "tenant_id");
  Page<DeploymentRecord> page;
  if (ctx.principal->is_platform()) {
    // With tenant_id: what that tenant may use, as it would see the list.
    if (tenant.empty()) {
      ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListDeploymentsForPlatform(filter, opts));
    } else {
      ATRIUM_ASSIGN_OR_RETURN(
          page, ctx.services.store->ListDeployments(TenantScope::Of(tenant), filter, opts));
    }
  } else {
    if (!tenant.empty() && tenant != ctx.scope.tenant_id) {
      return Error::NotFound("tenant not found");
    }
    ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListDeployments(ctx.scope, filter, opts));
  }
  return JsonResponse(200, PageView(page, [&ctx](const DeploymentRecord& d) {
                        return DeploymentView(d, ShowsEndpoints(ctx, d));
                      }));
}

Result<http::Response> GetDeployment(Context& ctx) {
  const DeploymentRecord& d = *ctx.deployment;
  return JsonResponse(200, DeploymentView(d, ShowsEndpoints(ctx, d)));
}

Result<http::Response> UpdateDeployment(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  if (body.is_object() && (body.contains("visibility") || body.contains("tenant_id"))) {
    return Error::InvalidArgument(
        "visibility and tenant_id are fixed when a deployment is created; create a new one");
  }
  JsonObjectReader r(body);
  ATRIUM_ASSIGN_OR_RETURN(DeploymentFields fields, FieldsOf(body, r, /*required=*/false));
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(Validate(fields));
  DeploymentRecord d = *ctx.deployment;
  if (fields.region && !d.tenant_id.empty() && *fields.region != d.region) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(d.tenant_id));
    ATRIUM_RETURN_IF_ERROR(CheckResidency(t, *fields.region));
  }
  Apply(fields, d);
  d.updated_at = ctx.services.clock->NowMillis();
  // Checked again when the endpoints or the model change (not a mere move
  // between regions: an endpoint stored before a stricter policy is the
  // gateway's to refuse when it connects).
  if (fields.endpoints || fields.model) ATRIUM_RETURN_IF_ERROR(CheckDedicated(ctx, d));
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->UpdateDeployment(TenantScope::Of(d.tenant_id), d));
  return JsonResponse(200, DeploymentView(d, true));
}

Result<http::Response> DeleteDeployment(Context& ctx) {
  const DeploymentRecord& d = *ctx.deployment;
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->DeleteDeployment(TenantScope::Of(d.tenant_id), d.id));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
