// What a tenant held on GPUs, as the GPU meter (src/metering) billed it,
// and what its jobs ran within that: the usage records (one per allocation
// or job run and clock hour) and their sums per GPU model and kind or per
// project or managed deployment, time held (billed) and time run by jobs
// (not billed on top) apart. Each tenant reads only its own; platform staff read any tenant's
// through the same paths.
#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"

namespace atrium::api {
namespace {

// The filters' text is compared, never stored: this bound only keeps a
// hostile query from costing more than a plain one.
constexpr size_t kMaxFilterLength = 200;

bool IsIdText(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

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
  f.deployment_id = QueryOf(ctx.request, "deployment");
  if (!f.deployment_id.empty() &&
      (f.deployment_id.size() > kMaxFilterLength || !IsIdText(f.deployment_id))) {
    return Error::InvalidArgument(
        "'deployment' must be a deployment id (letters, digits, '_' and '-')");
  }
  return f;
}

// The list's filters: the summary's, and which subjects.
Result<GpuUsageFilter> GpuUsageListFilterOf(const Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(GpuUsageFilter f, GpuUsageFilterOf(ctx));
  f.subject_kind = QueryOf(ctx.request, "subject_kind");
  if (!f.subject_kind.empty() && f.subject_kind != "allocation" && f.subject_kind != "job") {
    return Error::InvalidArgument("subject_kind must be allocation or job");
  }
  f.job_id = QueryOf(ctx.request, "job");
  if (!f.job_id.empty()) {
    if (f.job_id.size() > kMaxFilterLength || !IsIdText(f.job_id)) {
      return Error::InvalidArgument("'job' must be a job id (letters, digits, '_' and '-')");
    }
    if (f.subject_kind == "allocation") {
      return Error::InvalidArgument("'job' selects job records: subject_kind must be job or unset");
    }
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
          {"deployment_id", g.deployment_id.empty() ? Json(nullptr) : Json(g.deployment_id)},
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
  } else if (group_by == "deployment") {
    // Usage outside any managed deployment sums under null.
    out["deployment_id"] = t.deployment_id.empty() ? Json(nullptr) : Json(t.deployment_id);
  }
  return out;
}

}  // namespace

Result<http::Response> ListGpuUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  ATRIUM_ASSIGN_OR_RETURN(GpuUsageFilter filter, GpuUsageListFilterOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto page, ctx.services.store->ListGpuUsage(ctx.scope, filter, opts));
  return JsonResponse(200, PageView(page, GpuUsageView));
}

Result<http::Response> SummarizeGpuUsage(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(GpuUsageFilter filter, GpuUsageFilterOf(ctx));
  std::string group_by = QueryOf(ctx.request, "group_by");
  if (!group_by.empty() && group_by != "model" && group_by != "project" &&
      group_by != "deployment") {
    return Error::InvalidArgument("group_by must be model, project or deployment");
  }
  // Two sums, never one: the allocations' held time is what is billed;
  // jobs ran within it, so their time is shown apart and not added on top.
  auto totals_of = [&](const char* subject_kind) -> Result<Json> {
    GpuUsageFilter f = filter;
    f.subject_kind = subject_kind;
    ATRIUM_ASSIGN_OR_RETURN(auto totals,
                            ctx.services.store->SummarizeGpuUsage(ctx.scope, f, group_by));
    Json items = Json::array();
    for (const auto& t : totals) items.push_back(GpuUsageTotalsView(t, group_by));
    return items;
  };
  ATRIUM_ASSIGN_OR_RETURN(Json held, totals_of("allocation"));
  ATRIUM_ASSIGN_OR_RETURN(Json run_by_jobs, totals_of("job"));
  return JsonResponse(200, {{"tenant_id", ctx.scope.tenant_id},
                            {"group_by", group_by.empty() ? Json(nullptr) : Json(group_by)},
                            {"from", TimeOrNull(filter.from)},
                            {"to", TimeOrNull(filter.to)},
                            {"items", held},
                            {"run_by_jobs", run_by_jobs}});
}

}  // namespace atrium::api
