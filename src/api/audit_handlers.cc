// The audit trail: operators read all of it, tenant admins their own chain.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {

namespace {
Result<http::Response> ListAuditFor(Context& ctx, const std::optional<std::string>& tenant) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  if (!opts.after.empty() && opts.after.find_first_not_of("0123456789") != std::string::npos) {
    return Error::InvalidArgument("cursor must be a sequence number");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListAudit(tenant, opts));
  return JsonResponse(200, PageView(page, AuditView));
}
}  // namespace

Result<http::Response> ListAllAudit(Context& ctx) { return ListAuditFor(ctx, std::nullopt); }

Result<http::Response> ListTenantAudit(Context& ctx) {
  return ListAuditFor(ctx, ctx.scope.tenant_id);
}

}  // namespace atrium::api
