// Environment templates: the platform's (/api/v1/platform/...) and a
// tenant's (/api/v1/tenants/{tenant_id}/...). The rules are in
// src/templates; these only translate JSON.
#include "api/handler_util.h"
#include "api/handlers.h"

namespace atrium::api {
namespace {

Json OrNullText(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

Json TemplateView(const EnvironmentTemplateRecord& t) {
  return {{"owner", t.tenant_id.empty() ? "platform" : "tenant"},
          {"tenant_id", OrNullText(t.tenant_id)},
          {"name", t.name},
          {"version", t.version},
          {"reference", t.name + "@" + std::to_string(t.version)},
          {"description", t.description},
          {"rootfs_digest", t.rootfs_digest},
          {"env", t.env},
          {"requirements",
           {{"min_driver_version", OrNullText(t.min_driver_version)},
            {"min_cuda_version", OrNullText(t.min_cuda_version)},
            {"gpu_models", t.gpu_models}}},
          {"state", t.state},
          {"created_by", OrNullText(t.created_by)},
          {"created_at", FormatTimestamp(t.created_at)},
          {"updated_at", FormatTimestamp(t.updated_at)}};
}

Result<templates::TemplateService*> TemplatesOf(const Context& ctx) {
  if (ctx.services.templates == nullptr) {
    return Error::Unavailable("environment templates are not served by this server");
  }
  return ctx.services.templates;
}

// The body of a publish. Sizes are bounded here (the reader) and again by
// ValidateDraft, which gives the precise refusal.
Result<templates::TemplateDraft> DraftOf(const Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  templates::TemplateDraft d;
  d.name = r.String("name", true, 256).value_or("");
  d.description = r.String("description", false, 4096).value_or("");
  d.rootfs_digest = r.String("rootfs_digest", true, 256).value_or("");
  d.env = r.StringMap("env", false, templates::kMaxEnvVariables, templates::kMaxEnvValueLength)
              .value_or(std::map<std::string, std::string>{});
  // The reader reads no nested objects; IsNull marks the field known.
  const bool no_requirements = r.IsNull("requirements");
  auto q = body.is_object() ? body.find("requirements") : body.end();
  if (!no_requirements && body.is_object() && q != body.end()) {
    if (!q->is_object()) {
      return Error::InvalidArgument(
          "field 'requirements' must be an object {min_driver_version, min_cuda_version, "
          "gpu_models}");
    }
    JsonObjectReader rq(*q, "requirements");
    d.requirements.min_driver_version = rq.String("min_driver_version", false, 64).value_or("");
    d.requirements.min_cuda_version = rq.String("min_cuda_version", false, 64).value_or("");
    d.requirements.gpu_models =
        rq.StringList("gpu_models", false, 64, 64).value_or(std::vector<std::string>{});
    ATRIUM_RETURN_IF_ERROR(rq.Finish());
  }
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  return d;
}

}  // namespace

Result<http::Response> ListTemplates(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* service, TemplatesOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto rows, service->List(ctx.scope));
  Json items = Json::array();
  for (const auto& t : rows) items.push_back(TemplateView(t));
  return JsonResponse(200, {{"items", items}});
}

Result<http::Response> GetTemplate(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* service, TemplatesOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto t, service->Get(ctx.scope, ctx.request.PathParam("template")));
  return JsonResponse(200, TemplateView(t));
}

Result<http::Response> PublishTemplate(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* service, TemplatesOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto draft, DraftOf(ctx));
  ctx.audit_target += "/environment-template/" + draft.name.substr(0, 63);
  ATRIUM_ASSIGN_OR_RETURN(auto t,
                          service->Publish(ctx.scope, std::move(draft), ctx.principal->user_id));
  ctx.audit_target += "@" + std::to_string(t.version);
  return JsonResponse(201, TemplateView(t));
}

Result<http::Response> RetireTemplate(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* service, TemplatesOf(ctx));
  const std::string& reference = ctx.request.PathParam("template");
  ctx.audit_target += "/environment-template/" + reference.substr(0, 80);
  ATRIUM_ASSIGN_OR_RETURN(auto t, service->Retire(ctx.scope, reference));
  return JsonResponse(200, TemplateView(t));
}

}  // namespace atrium::api
