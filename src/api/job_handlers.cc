// /api/v1/jobs: tenants submit jobs, list them, cancel them, read their
// events and logs and ask why one waits. The tenant is always the caller's;
// platform staff read and cancel any tenant's job but never read its logs.
#include <algorithm>
#include <charconv>
#include <system_error>

#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "billing/billing_service.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"

namespace atrium::api {
namespace {

Result<jobs::JobService*> JobsOf(const Context& ctx) {
  if (ctx.services.jobs == nullptr) {
    return Error::Unavailable("this server runs no jobs (no execution backend)");
  }
  return ctx.services.jobs;
}

Json JobViewFor(const Context& ctx, const JobRecord& j) {
  return JobView(j, !ctx.principal->is_platform());
}

// A non-negative integer query parameter within [min, max]; `fallback`
// when absent.
Result<int64_t> IntQuery(const http::Request& req, const std::string& name, int64_t min,
                         int64_t max, int64_t fallback) {
  auto it = req.query.find(name);
  if (it == req.query.end()) return fallback;
  const std::string& text = it->second;
  int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || text[0] == '-' || ec != std::errc() || ptr != end) {
    return Error::InvalidArgument("query parameter '" + name + "' must be an integer");
  }
  if (v < min || v > max) {
    return Error::InvalidArgument("query parameter '" + name + "' must be " + std::to_string(min) +
                                  ".." + std::to_string(max));
  }
  return v;
}

// The Idempotency-Key header: printable ASCII, at most 255 bytes.
Result<std::string> IdempotencyKeyOf(const http::Request& req) {
  const std::string& key = req.Header("idempotency-key");
  if (key.size() > 255) return Error::InvalidArgument("Idempotency-Key is longer than 255 bytes");
  if (!std::all_of(key.begin(), key.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    return Error::InvalidArgument("Idempotency-Key must be printable ASCII without spaces");
  }
  return key;
}

}  // namespace

Result<http::Response> CreateJob(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* jobs, JobsOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  ATRIUM_ASSIGN_OR_RETURN(jobs::JobSpec spec, jobs::ReadJobSpec(body));
  ATRIUM_ASSIGN_OR_RETURN(std::string key, IdempotencyKeyOf(ctx.request));
  // A spent hard budget stops new work (what runs goes on).
  if (ctx.services.billing != nullptr) {
    ATRIUM_RETURN_IF_ERROR(ctx.services.billing->CheckSpend(ctx.scope.tenant_id, spec.project));
  }
  ATRIUM_ASSIGN_OR_RETURN(
      jobs::JobService::Submitted submitted,
      jobs->Submit(OriginOf(ctx), ctx.scope.tenant_id, ctx.principal->user_id, spec, key));
  ctx.audit_target = "tenant/" + submitted.job.tenant_id + "/job/" + submitted.job.id;
  // A retried submission answers 200 with the job the first one made.
  return JsonResponse(submitted.created ? 201 : 200, JobViewFor(ctx, submitted.job));
}

Result<http::Response> ListJobs(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  JobFilter filter;
  if (auto it = ctx.request.query.find("state"); it != ctx.request.query.end()) {
    if (!jobs::ParseState(it->second)) {
      std::string known;
      for (const std::string& s : jobs::AllJobStateNames())
        known += (known.empty() ? "" : ", ") + s;
      return Error::InvalidArgument("state must be one of " + known);
    }
    filter.state = it->second;
  }
  filter.project = QueryOf(ctx.request, "project");
  const std::string tenant = QueryOf(ctx.request, "tenant_id");
  Page<JobRecord> page;
  if (ctx.principal->is_platform()) {
    filter.tenant_id = tenant;
    ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListJobsForPlatform(filter, opts));
  } else {
    if (!tenant.empty() && tenant != ctx.scope.tenant_id)
      return Error::NotFound("tenant not found");
    ATRIUM_ASSIGN_OR_RETURN(page, ctx.services.store->ListJobs(ctx.scope, filter, opts));
  }
  return JsonResponse(200, PageView(page, [&](const JobRecord& j) { return JobViewFor(ctx, j); }));
}

Result<http::Response> GetJob(Context& ctx) { return JsonResponse(200, JobViewFor(ctx, *ctx.job)); }

Result<http::Response> CancelJob(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* jobs, JobsOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(JobRecord j,
                          jobs->Cancel(OriginOf(ctx), ctx.scope.tenant_id, ctx.job->id));
  // Stopping: 202 until the backend reports the workload gone.
  const bool ended = !jobs::IsLive(jobs::ParseState(j.state).value_or(jobs::JobState::kLost));
  return JsonResponse(ended ? 200 : 202, JobViewFor(ctx, j));
}

Result<http::Response> ListJobEvents(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  ATRIUM_ASSIGN_OR_RETURN(auto page,
                          ctx.services.store->ListJobEvents(ctx.scope, ctx.job->id, opts));
  return JsonResponse(200, PageView(page, JobEventView));
}

Result<http::Response> GetJobLogs(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* jobs, JobsOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(int64_t offset, IntQuery(ctx.request, "offset", 0, int64_t{1} << 50, 0));
  ATRIUM_ASSIGN_OR_RETURN(int64_t max_bytes, IntQuery(ctx.request, "max_bytes", 1, int64_t{1} << 20,
                                                      int64_t{64} * 1024));
  ATRIUM_ASSIGN_OR_RETURN(int64_t attempt, IntQuery(ctx.request, "attempt", 0, 1'000'000, 0));
  const std::string follow = QueryOf(ctx.request, "follow");
  if (!follow.empty() && follow != "true" && follow != "false") {
    return Error::InvalidArgument("query parameter 'follow' must be true or false");
  }
  // A follower waits (bounded by the service, and only while a waiter's
  // place is free) for more before answering.
  const int64_t wait_ms = follow == "true" ? 10'000 : 0;
  ATRIUM_ASSIGN_OR_RETURN(exec::LogChunk chunk, jobs->ReadLog(ctx.scope.tenant_id, ctx.job->id,
                                                              attempt, offset, max_bytes, wait_ms));
  Json body = {{"data", chunk.data},
               {"offset", chunk.offset},
               {"next_offset", chunk.next_offset},
               {"dropped", chunk.dropped},
               {"complete", chunk.complete}};
  http::Response r;
  r.status = 200;
  // A log is whatever the workload wrote: bytes that are not UTF-8 are
  // replaced rather than refused.
  r.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return r;
}

Result<http::Response> ExplainJob(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* jobs, JobsOf(ctx));
  const auto audience = ctx.principal->is_platform() ? sched::Scheduler::Audience::kStaff
                                                     : sched::Scheduler::Audience::kOwner;
  ATRIUM_ASSIGN_OR_RETURN(std::string why,
                          jobs->Explain(ctx.scope.tenant_id, ctx.job->id, audience));
  return JsonResponse(200, {{"id", ctx.job->id}, {"state", ctx.job->state}, {"why", why}});
}

}  // namespace atrium::api
