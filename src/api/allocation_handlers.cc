// /api/v1/allocations: tenants request GPUs (whole, gang, MIG slice, share,
// node), list, release and ask why one waits. The tenant is always the
// caller's; platform staff read and release any tenant's.
#include <algorithm>

#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "billing/billing_service.h"
#include "scheduler/allocation.h"
#include "scheduler/request_json.h"
#include "scheduler/scheduler.h"

namespace atrium::api {
namespace {

// The request, and the tenant the body names ("" when it names none).
Result<sched::AllocationRequest> RequestOf(Context& ctx, std::string& named_tenant) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  named_tenant = r.String("tenant_id", false, 64).value_or("");
  sched::AllocationFields fields = sched::ReadAllocationFields(r);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  return sched::AllocationRequestOf(fields);
}

// What the caller may read of an allocation. Platform staff read all of
// it; a tenant is not told which allocation of another tenant reclaims its
// work (preempted_for names one only when it is the tenant's own — the
// reason already says "another tenant's guarantee").
Json AllocationViewFor(Context& ctx, const AllocationRecord& a) {
  if (ctx.principal->is_platform() || a.preempted_for.empty()) return AllocationView(a);
  AllocationRecord shown = a;
  if (!ctx.services.store->GetAllocation(TenantScope::Of(a.tenant_id), a.preempted_for)) {
    shown.preempted_for.clear();
  }
  return AllocationView(shown);
}

}  // namespace

Result<http::Response> CreateAllocation(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  std::string named_tenant;
  ATRIUM_ASSIGN_OR_RETURN(sched::AllocationRequest request, RequestOf(ctx, named_tenant));
  if (ctx.principal->is_platform()) {
    // Platform staff have no tenant of their own: they name the one they
    // act for, as a path would.
    if (named_tenant.empty()) {
      return Error::InvalidArgument("platform staff must name the tenant in 'tenant_id'");
    }
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, ctx.services.store->GetTenant(named_tenant));
    ctx.scope = TenantScope::Of(t.id);
  } else if (!named_tenant.empty() && named_tenant != ctx.scope.tenant_id) {
    // Only the caller's own tenant exists for it.
    return Error::NotFound("tenant not found");
  }
  // A spent hard budget stops new work (what runs goes on).
  if (ctx.services.billing != nullptr) {
    ATRIUM_RETURN_IF_ERROR(ctx.services.billing->CheckSpend(ctx.scope.tenant_id, request.project));
  }
  ATRIUM_ASSIGN_OR_RETURN(AllocationRecord a,
                          scheduling->Submit(OriginOf(ctx), ctx.scope.tenant_id,
                                             ctx.principal->user_id, std::move(request)));
  ctx.audit_target = "tenant/" + a.tenant_id + "/allocation/" + a.id;
  // Placed at once: 201. Queued: 202, and GET .../why says what it waits for.
  return JsonResponse(a.state == "pending" ? 202 : 201, AllocationViewFor(ctx, a));
}

Result<http::Response> ListAllocations(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  AllocationFilter filter;
  if (auto it = ctx.request.query.find("state"); it != ctx.request.query.end()) {
    const std::vector<std::string>& states = sched::AllAllocationStateNames();
    if (std::find(states.begin(), states.end(), it->second) == states.end()) {
      std::string known;
      for (const std::string& state : states) known += (known.empty() ? "" : ", ") + state;
      return Error::InvalidArgument("state must be one of " + known);
    }
    filter.state = it->second;
  }
  std::string tenant;
  if (auto it = ctx.request.query.find("tenant_id"); it != ctx.request.query.end()) {
    tenant = it->second;
  }
  Page<AllocationRecord> page;
  if (ctx.principal->is_platform()) {
    filter.tenant_id = tenant;
    ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListAllocationsForPlatform(filter, opts));
  } else {
    // A tenant caller may name only its own tenant; any other answers like
    // a tenant that does not exist.
    if (!tenant.empty() && tenant != ctx.scope.tenant_id) {
      return Error::NotFound("tenant not found");
    }
    ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListAllocations(ctx.scope, filter, opts));
  }
  return JsonResponse(
      200, PageView(page, [&](const AllocationRecord& a) { return AllocationViewFor(ctx, a); }));
}

Result<http::Response> GetAllocation(Context& ctx) {
  return JsonResponse(200, AllocationViewFor(ctx, *ctx.allocation));
}

Result<http::Response> ReleaseAllocation(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(
      AllocationRecord a,
      scheduling->Release(OriginOf(ctx), ctx.scope.tenant_id, ctx.allocation->id));
  return JsonResponse(200, AllocationViewFor(ctx, a));
}

Result<http::Response> ExplainAllocation(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  // Staff see which allocations of which tenants a reclaim involves; a
  // tenant sees only its own named.
  const auto audience = ctx.principal->is_platform() ? sched::Scheduler::Audience::kStaff
                                                     : sched::Scheduler::Audience::kOwner;
  ATRIUM_ASSIGN_OR_RETURN(std::string why,
                          scheduling->Explain(ctx.scope.tenant_id, ctx.allocation->id, audience));
  ATRIUM_ASSIGN_OR_RETURN(AllocationRecord a,
                          ctx.services.store->GetAllocation(ctx.scope, ctx.allocation->id));
  return JsonResponse(200, {{"id", a.id}, {"state", a.state}, {"explanation", why}});
}

}  // namespace atrium::api
