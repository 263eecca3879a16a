// What a tenant held on GPUs, as the GPU meter (src/metering) billed it:
// the usage records (one per allocation or job and clock hour) and their
// sums per GPU model and kind or per project. Each tenant reads only its
// own; platform staff read any tenant's through the same paths.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {
namespace {

// The filters' text is compared, never stored: this bound only keeps a
// hostile query from costing more than a plain one.
constexpr size_t kMaxFilterLength = 200;

Result<GpuUsageFilter> GpuUsageFilterOf(const Context& ctx) {
  GpuUsageFilter f;
  ATRIUM_ASSIGN_OR_RETURN(f.from, TimeQueryOf(ctx.request, "from"));
  ATRIUM_ASSIGN_OR_RETURN(f.to, TimeQueryOf(ctx.request, "to"));
  if (f.from != 0 && f.to != 0 && f.to <= f.from) {
    return Error::InvalidArgument("'to' must be after 'from'");
  }
  f.model = QueryOf(ctx.request, "model");
  f.project = QueryOf(ctx.request, "project");
  if (f.model.size() > kMaxFilterLength || f.project.size() > kMaxFilterLength) {
    return Error::InvalidArgument("'model' and 'project' are at most " +
                                  std::to_string(kMaxFilterLength) + " characters");
  }
  return f;
}

Json TimeOrNull(int64_t ms) { return ms == 0 ? Json(nullptr) : Json(FormatTimestamp(ms)); }

// GPU-seconds for people: the exact amount is gpu_milli_ms (1 GPU-second =
// 1,000,000 milli-GPU·ms); this is it divided, for display and sums in
// tools that want seconds.
double GpuSeconds(int64_t gpu_milli_ms) { return static_cast<double>(gpu_milli_ms) / 1e6; }

Json GpuUsageView(const GpuUsageRecord& g) {
  return {{"id", g.id},
          {"tenant_id", g.tenant_id},
          {"project", g.project},
          {"subject_kind", g.subject_kind},
          {"subject_id", g.subject_id},
          {"model", g.model},
          {"kind", g.kind},
          {"mig_profile", g.mig_profile.empty() ? Json(nullptr) : Json(g.mig_profile)},
          {"milli", g.milli},
          {"from", FormatTimestamp(g.from_ms)},
          {"to", FormatTimestamp(g.to_ms)},
          {"gpu_milli_ms", g.gpu_milli_ms},
          {"gpu_seconds", GpuSeconds(g.gpu_milli_ms)},
          {"closes_subject", g.closes_subject},
          {"created_at", FormatTimestamp(g.created_at)}};
}

Json GpuUsageTotalsView(const GpuUsageTotals& t, const std::string& group_by) {
  Json out = {{"records", t.records},
              {"gpu_milli_ms", t.gpu_milli_ms},
              {"gpu_seconds", GpuSeconds(t.gpu_milli_ms)}};
  if (group_by == "model") {
    out["model"] = t.model;
    out["kind"] = t.kind;
  } else if (group_by == "project") {
    out["project"] = t.project;
  }
  return out;
}

}  // namespace

Result<http::Response> ListGpuUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  ATRIUM_ASSIGN_OR_RETURN(GpuUsageFilter filter, GpuUsageFilterOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListGpuUsage(ctx.scope, filter, opts));
  return JsonResponse(200, PageView(page, GpuUsageView));
}

Result<http::Response> SummarizeGpuUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(GpuUsageFilter filter, GpuUsageFilterOf(ctx));
  std::string group_by = QueryOf(ctx.request, "group_by");
  if (!group_by.empty() && group_by != "model" && group_by != "project") {
    return Error::InvalidArgument("group_by must be model or project");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto totals,
                          ctx.services.store->SummarizeGpuUsage(ctx.scope, filter, group_by));
  Json items = Json::array();
  for (const auto& t : totals) items.push_back(GpuUsageTotalsView(t, group_by));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id},
                            {"group_by", group_by.empty() ? Json(nullptr) : Json(group_by)},
                            {"from", TimeOrNull(filter.from)},
                            {"to", TimeOrNull(filter.to)},
                            {"items", items}});
}

}  // namespace atrium::api
