// The audit trail: operators read all of it, tenant admins their own chain.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "store/audit_state.h"

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

// What an export ends with and a verifier checks the records against: each
// chain's head, the global sequence number (whole trail only: a tenant's
// chain holds only some of the numbers) and the last signed checkpoint
// (only the tenant's own chain of it).
Result<http::Response> AuditHeadsFor(Context& ctx, const std::optional<std::string>& tenant) {
  // The checkpoint before the state: the state is then at least as far on.
  std::optional<audit::Checkpoint> checkpoint;
  if (ctx.services.audit_checkpoint) checkpoint = ctx.services.audit_checkpoint();
  ATRIUM_ASSIGN_OR_RETURN(audit::TrailState state, ReadAuditState(ctx.services.store->database()));
  Json heads = Json::array();
  for (const auto& head : state.heads) {
    if (tenant && head.chain != *tenant) continue;
    heads.push_back({{"chain", head.chain}, {"chain_seq", head.chain_seq}, {"hash", head.hash}});
  }
  Json body = {{"heads", std::move(heads)}, {"checkpoint", nullptr}};
  if (checkpoint) {
    body["checkpoint"] =
        audit::CheckpointToJson(tenant ? audit::OnlyChain(*checkpoint, *tenant) : *checkpoint);
  }
  if (!tenant) body["last_seq"] = state.last_seq;
  return JsonResponse(200, body);
}
}  // namespace

Result<http::Response> ListAllAudit(Context& ctx) { return ListAuditFor(ctx, std::nullopt); }

Result<http::Response> AuditHeads(Context& ctx) { return AuditHeadsFor(ctx, std::nullopt); }

Result<http::Response> TenantAuditHeads(Context& ctx) {
  return AuditHeadsFor(ctx, ctx.scope.tenant_id);
}

Result<http::Response> ListTenantAudit(Context& ctx) {
  return ListAuditFor(ctx, ctx.scope.tenant_id);
}

}  // namespace atrium::api
