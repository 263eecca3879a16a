// /api/v1/deployments: the models the gateway serves and where they run.
// Platform staff manage shared deployments (every entitled tenant uses them)
// and may place a dedicated one for a tenant; a tenant admin manages its own
// tenant's dedicated deployments. Tenants see their dedicated deployments
// and the shared ones of models they are entitled to, without the shared
// ones' endpoint URLs (the operator's servers). A dedicated deployment's
// endpoints must pass the operator's egress policy, and where the operator
// requires it the tenant must be entitled to its model.
//
// A managed deployment (`serving`: a template, resources per replica,
// replicas) is run by the serving controller (src/serving): its endpoints
// are its ready replicas, never written here. Extra engine arguments are
// platform staff's to set; a tenant's dedicated replicas are its jobs,
// held to its quota.
#include <algorithm>
#include <set>

#include "api/gateway_validation.h"
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "crypto/ids.h"
#include "serving/deployment_controller.h"
#include "serving/replica_plan.h"

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
  std::optional<Json> serving;  // the managed spec as sent
};

// Reads and validates the common fields; `required` for create.
Result<DeploymentFields> FieldsOf(const Json& body, JsonObjectReader& r, bool required) {
  DeploymentFields f;
  f.model = r.String("model", required, kMaxModelNameBytes);
  f.version = r.String("version", false, 64);
  f.region = r.String("region", required, 63);
  f.latency_tier = r.String("latency_tier", false, 16);
  // An object: read by serving::ReadManagedSpec; IsNull marks it known.
  const bool serving_null = r.IsNull("serving");
  const bool managed = body.is_object() && body.contains("serving");
  if (managed) {
    if (serving_null) return Error::InvalidArgument("field 'serving' must be an object");
    f.serving = body["serving"];
  }
  ATRIUM_ASSIGN_OR_RETURN(f.endpoints, EndpointsOf(body, r, /*required=*/false));
  return f;
}

Status Validate(const DeploymentFields& f, bool create) {
  if (create && !f.serving && !f.endpoints) {
    return Error::InvalidArgument(
        "a deployment needs 'endpoints' (servers someone else runs) or 'serving' (replicas the "
        "platform runs)");
  }
  if (f.serving && f.endpoints) {
    return Error::InvalidArgument(
        "a managed deployment's endpoints are its replicas: send 'serving' or 'endpoints', not "
        "both");
  }
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

serving::SpecAuthor AuthorOf(const Context& ctx) {
  return ctx.principal->is_platform() ? serving::SpecAuthor::kPlatform
                                      : serving::SpecAuthor::kTenant;
}

// The managed spec `sent` for deployment `d` (as it will be stored), over
// `before` (the stored spec; nullopt on create): checked against the
// templates this platform runs, its generation bumped when what a replica
// runs changed. A tenant's write keeps the extra arguments staff set.
Result<serving::ManagedSpec> SpecToStore(const Context& ctx, const DeploymentRecord& d,
                                         const Json& sent,
                                         const std::optional<serving::ManagedSpec>& before) {
  if (ctx.services.serving == nullptr) {
    return Error::Unavailable("this server runs no managed deployments (no workload backend)");
  }
  ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec spec, serving::ReadManagedSpec(sent, AuthorOf(ctx)));
  ATRIUM_RETURN_IF_ERROR(ctx.services.serving->CheckSpec(spec, d.tenant_id));
  if (before) {
    ATRIUM_ASSIGN_OR_RETURN(auto adapters, ctx.services.store->ListAdaptersForServing(d.id));
    if (static_cast<int64_t>(adapters.size()) > spec.max_adapters) {
      return Error::FailedPrecondition("serving.max_adapters: the deployment holds " +
                                       std::to_string(adapters.size()) +
                                       " adapters; their tenants must delete some first");
    }
    if (AuthorOf(ctx) == serving::SpecAuthor::kTenant) spec.extra_args = before->extra_args;
    if (spec.SameRun(*before)) {
      spec.generation = before->generation;
      spec.rolled_back_from = before->rolled_back_from;
    } else {
      spec.generation = before->generation + 1;
    }
  }
  return spec;
}

// The view of `d` for the caller, with its serving spec (extra arguments
// for platform staff only).
Json ViewFor(const Context& ctx, const DeploymentRecord& d) {
  Json view = DeploymentView(d, ShowsEndpoints(ctx, d));
  view["managed"] = d.managed();
  if (d.managed()) {
    auto spec = serving::ParseStoredSpec(d.serving);
    if (spec.has_value()) {
      Json s = serving::ManagedSpecJson(*spec);
      if (!ctx.principal->is_platform()) s.erase("extra_args");
      view["serving"] = s;
    }
  }
  return view;
}

Result<const DeploymentRecord*> ManagedOf(const Context& ctx) {
  if (!ctx.deployment->managed()) {
    return Error::FailedPrecondition(
        "deployment " + ctx.deployment->id +
        " is external (its endpoints are servers someone else runs): it has no replicas");
  }
  return &*ctx.deployment;
}

}  // namespace

Result<http::Response> CreateDeployment(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto visibility = r.String("visibility", false, 16);
  auto named_tenant = r.String("tenant_id", false, 64);
  ATRIUM_ASSIGN_OR_RETURN(DeploymentFields fields, FieldsOf(body, r, /*required=*/true));
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(Validate(fields, /*create=*/true));
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
  if (fields.serving) {
    ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec spec,
                            SpecToStore(ctx, d, *fields.serving, std::nullopt));
    d.serving = serving::ManagedSpecJson(spec).dump();
  }
  ATRIUM_RETURN_IF_ERROR(CheckDedicated(ctx, d));
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->CreateDeployment(d));
  return JsonResponse(201, ViewFor(ctx, d));
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
  return JsonResponse(
      200, PageView(page, [&ctx](const DeploymentRecord& d) { return ViewFor(ctx, d); }));
}

Result<http::Response> GetDeployment(Context& ctx) {
  return JsonResponse(200, ViewFor(ctx, *ctx.deployment));
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
  ATRIUM_RETURN_IF_ERROR(Validate(fields, /*create=*/false));
  DeploymentRecord d = *ctx.deployment;
  if (fields.region && !d.tenant_id.empty() && *fields.region != d.region) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(d.tenant_id));
    ATRIUM_RETURN_IF_ERROR(CheckResidency(t, *fields.region));
  }
  if (d.managed() && fields.endpoints) {
    return Error::InvalidArgument(
        "a managed deployment's endpoints are its replicas; change 'serving' instead");
  }
  if (!d.managed() && fields.serving) {
    return Error::InvalidArgument(
        "an external deployment stays external; create a managed one beside it");
  }
  if (fields.serving) {
    ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec before, serving::ParseStoredSpec(d.serving));
    ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec spec,
                            SpecToStore(ctx, d, *fields.serving, before));
    d.serving = serving::ManagedSpecJson(spec).dump();
  }
  Apply(fields, d);
  d.updated_at = ctx.services.clock->NowMillis();
  // Checked again when the endpoints or the model change (not a mere move
  // between regions: an endpoint stored before a stricter policy is the
  // gateway's to refuse when it connects).
  if (fields.endpoints || fields.model) ATRIUM_RETURN_IF_ERROR(CheckDedicated(ctx, d));
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->UpdateDeployment(TenantScope::Of(d.tenant_id), d));
  ATRIUM_ASSIGN_OR_RETURN(DeploymentRecord stored,
                          ctx.services.store->GetDeploymentForPlatform(d.id));
  return JsonResponse(200, ViewFor(ctx, stored));
}

Result<http::Response> DeleteDeployment(Context& ctx) {
  const DeploymentRecord& d = *ctx.deployment;
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->DeleteDeployment(TenantScope::Of(d.tenant_id), d.id));
  http::Response r;
  r.status = 204;
  return r;
}

Result<http::Response> ScaleDeployment(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto replicas = r.Int("replicas", true, 0, serving::kMaxReplicas);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_ASSIGN_OR_RETURN(const DeploymentRecord* found, ManagedOf(ctx));
  DeploymentRecord d = *found;
  ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec spec, serving::ParseStoredSpec(d.serving));
  ATRIUM_RETURN_IF_ERROR(serving::ScaleTo(spec, *replicas));
  d.serving = serving::ManagedSpecJson(spec).dump();
  d.updated_at = ctx.services.clock->NowMillis();
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->UpdateDeployment(TenantScope::Of(d.tenant_id), d));
  ATRIUM_ASSIGN_OR_RETURN(DeploymentRecord stored,
                          ctx.services.store->GetDeploymentForPlatform(d.id));
  return JsonResponse(200, ViewFor(ctx, stored));
}

Result<http::Response> ListDeploymentReplicas(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(const DeploymentRecord* d, ManagedOf(ctx));
  if (!ShowsEndpoints(ctx, *d)) {
    // A shared deployment's replicas are the operator's servers.
    return Error::PermissionDenied("a shared deployment's replicas are shown to platform staff");
  }
  ATRIUM_ASSIGN_OR_RETURN(std::vector<DeploymentReplicaRecord> replicas,
                          ctx.services.store->ListReplicas(d->id));
  Json items = Json::array();
  for (const auto& x : replicas) items.push_back(DeploymentReplicaView(x));
  return JsonResponse(200, {{"items", items}});
}

}  // namespace atrium::api
