// /api/v1/tenants/{tenant_id}/quotas and .../projects: operators set a
// tenant's quota per resource class; the tenant admin splits it among
// projects. Quotas are in milli-GPU of the class's model.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "common/strings.h"

namespace atrium::api {
namespace {

// 1,000,000 GPUs: far above any fleet, far below overflow.
constexpr int64_t kMaxQuotaMilli = 1'000'000'000;

Result<scheduling::QuotaChange> QuotaChangeOf(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  scheduling::QuotaChange change;
  change.model = r.String("model", true, 64).value_or("");
  change.kind = r.String("kind", true, 16).value_or("");
  change.guarantee_milli = r.Int("guarantee_milli", true, 0, kMaxQuotaMilli).value_or(0);
  change.limit_milli = r.Int("limit_milli", true, 0, kMaxQuotaMilli).value_or(0);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  if (change.kind == "gang") {
    return Error::InvalidArgument("kind must be gpu, mig, share or node (a gang uses kind gpu)");
  }
  return change;
}

Json QuotaList(scheduling::SchedulingService& scheduling, const std::string& tenant_id,
               const std::vector<QuotaRecord>& rows) {
  std::vector<QuotaRecord> own_rows;
  std::vector<scheduling::EffectiveQuota> own;
  for (auto& e : scheduling::EffectiveQuotas(rows)) {
    if (!e.row.project.empty()) continue;
    own_rows.push_back(e.row);
    own.push_back(std::move(e));
  }
  std::vector<int64_t> used = scheduling.UsedMilli(own_rows);
  Json items = Json::array();
  for (size_t i = 0; i < own.size(); ++i) items.push_back(QuotaView(own[i], used[i]));
  return {{"tenant_id", tenant_id}, {"items", items}};
}

Result<http::Response> ProjectAnswer(Context& ctx, int status, const ProjectRecord& project) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto quotas, ctx.services.store->ListQuotas(ctx.scope));
  return JsonResponse(status, ProjectView(project, scheduling::EffectiveQuotas(quotas),
                                          scheduling->UsedMilli(quotas)));
}

}  // namespace

Result<http::Response> GetQuotas(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto rows, ctx.services.store->ListQuotas(ctx.scope));
  return JsonResponse(200, QuotaList(*scheduling, ctx.scope.tenant_id, rows));
}

Result<http::Response> SetQuota(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto change, QuotaChangeOf(ctx));
  ctx.audit_target += "/quota/" + change.model + "/" + change.kind;
  ATRIUM_ASSIGN_OR_RETURN(auto set,
                          scheduling->SetQuota(OriginOf(ctx), ctx.scope.tenant_id, "", change));
  // The operator's change wins over the tenant admin's split; the record
  // in the tenant's chain and the answer say which projects it clamps.
  if (!set.clamped_projects.empty()) {
    std::string names;
    for (const auto& p : set.clamped_projects) names += (names.empty() ? "" : ",") + p;
    ctx.audit_target += " clamps projects " + names;
  }
  Json answer = QuotaList(*scheduling, ctx.scope.tenant_id, set.rows);
  answer["clamped_projects"] = set.clamped_projects;
  return JsonResponse(200, answer);
}

Result<http::Response> ListProjects(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto projects, ctx.services.store->ListProjects(ctx.scope));
  ATRIUM_ASSIGN_OR_RETURN(auto quotas, ctx.services.store->ListQuotas(ctx.scope));
  std::vector<int64_t> used = scheduling->UsedMilli(quotas);
  const auto effective = scheduling::EffectiveQuotas(quotas);
  Json items = Json::array();
  for (const auto& p : projects) items.push_back(ProjectView(p, effective, used));
  return JsonResponse(200, {{"items", items}, {"next_cursor", nullptr}});
}

Result<http::Response> CreateProject(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  std::string name = r.String("name", true, 63).value_or("");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  if (!IsValidSlug(name)) {
    return Error::InvalidArgument(
        "name must be 1-63 lower-case letters, digits, '-', '_' or '.', starting with a letter or "
        "digit");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto project,
                          scheduling->CreateProject(OriginOf(ctx), ctx.scope.tenant_id, name));
  ctx.audit_target += "/project/" + name;
  return ProjectAnswer(ctx, 201, project);
}

Result<http::Response> GetProject(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto project, ctx.services.store->GetProject(ctx.scope, ctx.request.PathParam("project")));
  return ProjectAnswer(ctx, 200, project);
}

Result<http::Response> SetProjectQuota(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string& name = ctx.request.PathParam("project");
  ctx.audit_target += "/project/" + name;
  ATRIUM_ASSIGN_OR_RETURN(auto project, ctx.services.store->GetProject(ctx.scope, name));
  ATRIUM_ASSIGN_OR_RETURN(auto change, QuotaChangeOf(ctx));
  ATRIUM_RETURN_IF_ERROR(scheduling->SetQuota(OriginOf(ctx), ctx.scope.tenant_id, name, change));
  return ProjectAnswer(ctx, 200, project);
}

Result<http::Response> ClearProjectQuota(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string& name = ctx.request.PathParam("project");
  const std::string& model = ctx.request.PathParam("model");
  const std::string& kind = ctx.request.PathParam("kind");
  ctx.audit_target += "/project/" + name + "/quota/" + model + "/" + kind;
  ATRIUM_ASSIGN_OR_RETURN(auto project, ctx.services.store->GetProject(ctx.scope, name));
  ATRIUM_RETURN_IF_ERROR(
      scheduling->ClearProjectQuota(OriginOf(ctx), ctx.scope.tenant_id, name, model, kind));
  return ProjectAnswer(ctx, 200, project);
}

Result<http::Response> DeleteProject(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string& name = ctx.request.PathParam("project");
  ctx.audit_target += "/project/" + name;
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->GetProject(ctx.scope, name));
  ATRIUM_RETURN_IF_ERROR(scheduling->DeleteProject(OriginOf(ctx), ctx.scope.tenant_id, name));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
