// /api/v1/tenants/{tenant_id}/adapters: a tenant's LoRA adapters on managed
// deployments that allow them (src/serving/adapters.h). A tenant registers
// one from an archive it uploaded, pinned by the archive's SHA-256, on a
// deployment it may use (its own dedicated one, or a shared one of a model
// it is entitled to); its clients then call "<model>:<name>" once the
// serving controller has every replica load it. Always the path's tenant:
// another tenant's adapter, archive or dedicated deployment answers like a
// missing one.
#include <algorithm>
#include <map>

#include "api/handler_util.h"
#include "api/handlers.h"
#include "crypto/ids.h"
#include "serving/adapters.h"
#include "serving/serving_spec.h"

namespace atrium::api {
namespace {

Json AdapterView(const AdapterRecord& a, const std::string& model) {
  Json view = {{"id", a.id},
               {"name", a.name},
               {"deployment", a.deployment_id},
               {"artifact", a.artifact},
               {"sha256", a.sha256},
               {"status", a.status},
               {"created_by", a.created_by},
               {"created_at", FormatTimestamp(a.created_at)},
               {"updated_at", FormatTimestamp(a.updated_at)}};
  // What clients call it; null when its deployment is no longer the
  // tenant's to use.
  view["model"] = model.empty() ? Json(nullptr) : Json(serving::AdapterModelName(model, a.name));
  view["detail"] = a.detail;
  return view;
}

// The model of deployment `id` as the scope sees it; "" when it cannot.
std::string ModelOf(const Context& ctx, const std::string& id,
                    std::map<std::string, std::string>& seen) {
  auto it = seen.find(id);
  if (it != seen.end()) return it->second;
  auto d = ctx.services.store->GetDeployment(ctx.scope, id);
  return seen[id] = d.has_value() ? d->model : "";
}

// A key scoped to some models registers and deletes adapters of those
// models only: what it makes is never wider than what it may call.
Status WithinScopes(const Context& ctx, const std::string& model) {
  const auto& scopes = ctx.principal->scopes;
  if (scopes.empty() || std::find(scopes.begin(), scopes.end(), model) != scopes.end()) {
    return OkStatus();
  }
  return Error::PermissionDenied("this key's scopes do not include the model `" + model + "`");
}

}  // namespace

Result<http::Response> CreateAdapter(Context& ctx) {
  if (ctx.services.archives == nullptr) {
    return Error::Unavailable(
        "this server keeps no archives, so no adapters (no execution backend)");
  }
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  auto name = r.String("name", true, serving::kMaxAdapterNameChars);
  auto deployment_id = r.String("deployment", true, 200);
  auto artifact = r.String("artifact", true, 256);
  auto sha256 = r.String("sha256", true, 64);
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(serving::ValidateAdapterName(*name));
  ATRIUM_ASSIGN_OR_RETURN(std::string digest, serving::NormalizeSha256(*sha256));
  ATRIUM_ASSIGN_OR_RETURN(std::string archive_id, serving::ArchiveOfArtifact(*artifact));

  // A deployment the tenant may use (another tenant's dedicated one, or a
  // shared one it is not entitled to, is not found), managed, allowing
  // adapters.
  ATRIUM_ASSIGN_OR_RETURN(DeploymentRecord d,
                          ctx.services.store->GetDeployment(ctx.scope, *deployment_id));
  ATRIUM_RETURN_IF_ERROR(WithinScopes(ctx, d.model));
  if (!d.managed()) {
    return Error::FailedPrecondition("deployment " + d.id +
                                     " runs on servers the platform does not manage: it loads no "
                                     "adapters");
  }
  ATRIUM_ASSIGN_OR_RETURN(serving::ManagedSpec spec, serving::ParseStoredSpec(d.serving));
  if (spec.max_adapters == 0) {
    return Error::FailedPrecondition("deployment " + d.id + " allows no adapters");
  }
  // The tenant's own archive, whose upload had this digest.
  ATRIUM_RETURN_IF_ERROR(
      ctx.services.archives->ResolvePinned(ctx.scope.tenant_id, archive_id, digest));

  AdapterRecord a;
  a.id = NewId("ad", *ctx.services.clock);
  a.deployment_id = d.id;
  a.name = *name;
  a.artifact = std::string(serving::kArchiveArtifactScheme) + archive_id;
  a.sha256 = digest;
  a.status = "loading";
  a.detail = "waiting for the serving controller";
  a.created_by = ctx.principal->user_id;
  a.created_at = a.updated_at = ctx.services.clock->NowMillis();
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/adapter/" + a.id;
  ATRIUM_ASSIGN_OR_RETURN(a,
                          ctx.services.store->CreateAdapter(ctx.scope, a, spec.max_adapters,
                                                            ctx.services.max_adapters_per_tenant));
  return JsonResponse(201, AdapterView(a, d.model));
}

Result<http::Response> ListAdapters(Context& ctx) {
  const std::string deployment = QueryOf(ctx.request, "deployment");
  if (deployment.size() > 200) return Error::InvalidArgument("deployment: at most 200 characters");
  ATRIUM_ASSIGN_OR_RETURN(auto list, ctx.services.store->ListAdapters(ctx.scope, deployment));
  std::map<std::string, std::string> models;
  Json items = Json::array();
  for (const auto& a : list) items.push_back(AdapterView(a, ModelOf(ctx, a.deployment_id, models)));
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetAdapter(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto a, ctx.services.store->GetAdapter(ctx.scope, ctx.request.PathParam("adapter_id")));
  std::map<std::string, std::string> models;
  return JsonResponse(200, AdapterView(a, ModelOf(ctx, a.deployment_id, models)));
}

Result<http::Response> DeleteAdapter(Context& ctx) {
  const std::string& id = ctx.request.PathParam("adapter_id");
  ctx.audit_target = "tenant/" + ctx.scope.tenant_id + "/adapter/" + id;
  if (!ctx.principal->scopes.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(auto a, ctx.services.store->GetAdapter(ctx.scope, id));
    std::map<std::string, std::string> models;
    ATRIUM_RETURN_IF_ERROR(WithinScopes(ctx, ModelOf(ctx, a.deployment_id, models)));
  }
  ATRIUM_RETURN_IF_ERROR(ctx.services.store->DeleteAdapter(ctx.scope, id));
  http::Response r;
  r.status = 204;
  return r;
}

}  // namespace atrium::api
