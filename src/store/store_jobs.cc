// Store: jobs and their events (src/jobs owns the rules).
#include <nlohmann/json.hpp>
#include <optional>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;
using Json = nlohmann::json;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

namespace {

constexpr char kJobColumns[] =
    "id, tenant_id, project, name, created_by, state, attempt, restarts, allocation_id, spec, "
    "idempotency_key, exit_code, signal, reason, stop_cause, stop_by, stop_deadline_ms, "
    "created_at, started_ms, ended_ms, updated_at";

JobRecord JobFromRow(const Row& r) {
  JobRecord j;
  j.id = r.Text(0);
  j.tenant_id = r.Text(1);
  j.project = r.Text(2);
  j.name = r.Text(3);
  j.created_by = r.Text(4);
  j.state = r.Text(5);
  j.attempt = r.Int(6);
  j.restarts = r.Int(7);
  j.allocation_id = r.Text(8);
  j.spec = r.Text(9);
  j.idempotency_key = r.Text(10);
  j.exit_code = r.Int(11);
  j.signal = r.Int(12);
  j.reason = r.Text(13);
  j.stop_cause = r.Text(14);
  j.stop_by = r.Text(15);
  j.stop_deadline_ms = r.Int(16);
  j.created_at = r.Int(17);
  j.started_ms = r.Int(18);
  j.ended_ms = r.Int(19);
  j.updated_at = r.Int(20);
  return j;
}

std::vector<Value> JobValues(const JobRecord& j) {
  return {j.id,         j.tenant_id, j.project,       j.name,    j.created_by,       j.state,
          j.attempt,    j.restarts,  j.allocation_id, j.spec,    j.idempotency_key,  j.exit_code,
          j.signal,     j.reason,    j.stop_cause,    j.stop_by, j.stop_deadline_ms, j.created_at,
          j.started_ms, j.ended_ms,  j.updated_at};
}

// The states of a job that holds, or waits for, an allocation.
constexpr char kLiveStates[] = "state IN ('pending', 'starting', 'running')";

// `text` as a LIKE pattern that matches it anywhere, its wildcards (and
// the escape character) escaped with a backslash.
std::string ContainsPattern(std::string_view text) {
  std::string out = "%";
  for (char ch : text) {
    if (ch == '%' || ch == '_' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "%";
}

constexpr char kEventColumns[] =
    "job_id, seq, tenant_id, time, attempt, from_state, to_state, reason, actor";

JobEventRecord EventFromRow(const Row& r) {
  JobEventRecord e;
  e.job_id = r.Text(0);
  e.seq = r.Int(1);
  e.tenant_id = r.Text(2);
  e.time = r.Int(3);
  e.attempt = r.Int(4);
  e.from_state = r.Text(5);
  e.to_state = r.Text(6);
  e.reason = r.Text(7);
  e.actor = r.Text(8);
  return e;
}

Status AppendEventOn(sql::Connection& c, const JobEventRecord& e) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto last,
      c.Exec("SELECT COALESCE(MAX(seq), 0) FROM job_events WHERE job_id = $1", {e.job_id}));
  const int64_t seq = last.rows.at(0).Int(0) + 1;
  ATRIUM_RETURN_IF_ERROR(c.Exec(std::string("INSERT INTO job_events (") + kEventColumns +
                                    ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                                {e.job_id, seq, e.tenant_id, e.time, e.attempt, e.from_state,
                                 e.to_state, e.reason, e.actor}));
  return OkStatus();
}

constexpr char kRunColumns[] =
    "job_id, attempt, tenant_id, project, allocation_id, started_ms, ended_ms, updated_at";

// A run from the first eight columns of `r` (kRunColumns' order).
JobRunRecord RunFromRow(const Row& r) {
  JobRunRecord run;
  run.job_id = r.Text(0);
  run.attempt = r.Int(1);
  run.tenant_id = r.Text(2);
  run.project = r.Text(3);
  run.allocation_id = r.Text(4);
  run.started_ms = r.Int(5);
  run.ended_ms = r.Int(6);
  run.updated_at = r.Int(7);
  return run;
}

// Inserts the run, or updates its start, end and updated_at. A run never
// moves to another job, tenant or allocation: those stay as first written.
Status UpsertRunOn(sql::Connection& c, const JobRunRecord& run) {
  ATRIUM_RETURN_IF_ERROR(
      c.Exec(std::string("INSERT INTO job_runs (") + kRunColumns +
                 ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (job_id, attempt) DO "
                 "UPDATE SET started_ms = excluded.started_ms, ended_ms = excluded.ended_ms, "
                 "updated_at = excluded.updated_at",
             {run.job_id, run.attempt, run.tenant_id, run.project, run.allocation_id,
              run.started_ms, run.ended_ms, run.updated_at}));
  return OkStatus();
}

// The run of the row's current attempt; nullopt before it started.
std::optional<JobRunRecord> RunOfRow(const JobRecord& j) {
  if (j.started_ms < 0) return std::nullopt;
  return JobRunRecord{j.id,         j.attempt,  j.tenant_id, j.project, j.allocation_id,
                      j.started_ms, j.ended_ms, j.updated_at};
}

Result<std::vector<JobRecord>> JobsWhere(sql::Database& db, const std::string& where,
                                         const std::vector<Value>& params) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db.Exec(std::string("SELECT ") + kJobColumns +
                                                 " FROM jobs WHERE " + where + " ORDER BY id",
                                             params));
  std::vector<JobRecord> out;
  for (const auto& r : rows.rows) out.push_back(JobFromRow(r));
  return out;
}

Result<JobRecord> OneJob(Result<std::vector<JobRecord>> jobs) {
  if (!jobs.has_value()) return std::move(jobs).error();
  if (jobs->empty()) return Error::NotFound("job not found");
  return std::move(jobs->front());
}

Result<Page<JobRecord>> ListJobsWhere(sql::Database& db, const std::string* tenant_id,
                                      const JobFilter& filter, const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  std::string q = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id > $1";
  std::vector<Value> params = {opts.after};
  auto add = [&](const char* column, const std::string& value) {
    params.push_back(value);
    q += std::string(" AND ") + column + " = $" + std::to_string(params.size());
  };
  if (tenant_id) add("tenant_id", *tenant_id);
  if (!filter.state.empty()) add("state", filter.state);
  if (!filter.project.empty()) add("project", filter.project);
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY id LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db.Exec(q, params));
  std::vector<JobRecord> items;
  for (const auto& r : rows.rows) items.push_back(JobFromRow(r));
  return MakePage(std::move(items), limit, [](const JobRecord& j) { return j.id; });
}

}  // namespace

Result<JobRecord> Store::CreateJob(const JobRecord& job, const JobEventRecord& event,
                                   AuditRecord audit) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO jobs (") + kJobColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, "
                   "$16, $17, $18, $19, $20, $21)",
               JobValues(job)));
    ATRIUM_RETURN_IF_ERROR(AppendEventOn(c, event));
    ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, std::move(audit)));
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return job;
}

Status Store::CommitJob(const JobRecord& job, const std::vector<JobEventRecord>& events,
                        std::vector<AuditRecord> audit,
                        const std::vector<JobRunRecord>& ended_runs) {
  for (const JobRunRecord& run : ended_runs) {
    if (run.job_id != job.id || run.tenant_id != job.tenant_id || run.attempt >= job.attempt ||
        run.started_ms < 0) {
      return Error::InvalidArgument("job " + job.id + ": attempt " + std::to_string(run.attempt) +
                                    " is not a started earlier run of this job");
    }
  }
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    std::vector<Value> params = JobValues(job);
    // Every column but id and tenant_id, which find the row.
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c,
        "UPDATE jobs SET project = $3, name = $4, created_by = $5, state = $6, attempt = $7, "
        "restarts = $8, allocation_id = $9, spec = $10, idempotency_key = $11, exit_code = $12, "
        "signal = $13, reason = $14, stop_cause = $15, stop_by = $16, stop_deadline_ms = $17, "
        "created_at = $18, started_ms = $19, ended_ms = $20, updated_at = $21 "
        "WHERE id = $1 AND tenant_id = $2",
        params, "job"));
    for (const JobRunRecord& run : ended_runs) ATRIUM_RETURN_IF_ERROR(UpsertRunOn(c, run));
    if (auto run = RunOfRow(job)) ATRIUM_RETURN_IF_ERROR(UpsertRunOn(c, *run));
    for (const JobEventRecord& e : events) ATRIUM_RETURN_IF_ERROR(AppendEventOn(c, e));
    for (AuditRecord& a : audit) ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, std::move(a)));
    return true;
  }));
}

Result<std::vector<JobRunRecord>> Store::ListJobRuns(const TenantScope& scope,
                                                     const std::string& job_id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kRunColumns +
                                        " FROM job_runs WHERE tenant_id = $1 AND job_id = $2 "
                                        "ORDER BY attempt",
                                    {scope.tenant_id, job_id}));
  std::vector<JobRunRecord> out;
  for (const auto& r : rows.rows) out.push_back(RunFromRow(r));
  return out;
}

Result<std::vector<JobRunToMeter>> Store::ListJobRunsToMeterForMetering(int64_t changed_since_ms) {
  // The subject id the meter gives a run: "<job_id>.<attempt>".
  constexpr char kSubject[] = "r.job_id || '.' || CAST(r.attempt AS TEXT)";
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT r.job_id, r.attempt, r.tenant_id, r.project, "
                            "r.allocation_id, r.started_ms, r.ended_ms, r.updated_at, a.model, "
                            "a.kind, a.mig_profile, a.charge_milli, COALESCE((SELECT "
                            "MAX(dr.deployment_id) FROM deployment_replicas dr WHERE dr.job_id = "
                            "r.job_id AND dr.tenant_id = r.tenant_id), '') FROM job_runs r JOIN "
                            "allocations a ON a.id = r.allocation_id AND a.tenant_id = "
                            "r.tenant_id WHERE r.started_ms >= 0 AND (r.ended_ms < 0 OR "
                            "r.updated_at >= $1 OR EXISTS (SELECT 1 FROM gpu_usage_records g "
                            "WHERE g.subject_kind = 'job' AND g.subject_id = ") +
                    kSubject +
                    ")) AND NOT EXISTS (SELECT 1 FROM gpu_usage_records g WHERE g.subject_kind "
                    "= 'job' AND g.subject_id = " +
                    kSubject + " AND g.closes_subject = 1) ORDER BY r.job_id, r.attempt",
                {changed_since_ms}));
  std::vector<JobRunToMeter> out;
  for (const auto& r : rows.rows) {
    out.push_back({RunFromRow(r), r.Text(8), r.Text(9), r.Text(10), r.Int(11), r.Text(12)});
  }
  return out;
}

Result<JobRecord> Store::GetJob(const TenantScope& scope, const std::string& id) {
  return OneJob(JobsWhere(*db_, "tenant_id = $1 AND id = $2", {scope.tenant_id, id}));
}

Result<JobRecord> Store::GetJobByIdempotencyKey(const TenantScope& scope, const std::string& key) {
  if (key.empty()) return Error::NotFound("job not found");
  return OneJob(JobsWhere(*db_, "tenant_id = $1 AND idempotency_key = $2", {scope.tenant_id, key}));
}

Result<Page<JobRecord>> Store::ListJobs(const TenantScope& scope, const JobFilter& filter,
                                        const ListOptions& opts) {
  return ListJobsWhere(*db_, &scope.tenant_id, filter, opts);
}

Result<Page<JobEventRecord>> Store::ListJobEvents(const TenantScope& scope,
                                                  const std::string& job_id,
                                                  const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  int64_t after = 0;
  if (!opts.after.empty()) {
    try {
      after = std::stoll(opts.after);
    } catch (...) {
      return Error::InvalidArgument("malformed cursor");
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kEventColumns +
                                        " FROM job_events WHERE tenant_id = $1 AND job_id = $2 AND "
                                        "seq > $3 ORDER BY seq LIMIT $4",
                                    {scope.tenant_id, job_id, after, int64_t{limit + 1}}));
  std::vector<JobEventRecord> items;
  for (const auto& r : rows.rows) items.push_back(EventFromRow(r));
  return MakePage(std::move(items), limit,
                  [](const JobEventRecord& e) { return std::to_string(e.seq); });
}

Result<JobRecord> Store::GetJobForPlatform(const std::string& id) {
  return OneJob(JobsWhere(*db_, "id = $1", {id}));
}

Result<Page<JobRecord>> Store::ListJobsForPlatform(const JobFilter& filter,
                                                   const ListOptions& opts) {
  return ListJobsWhere(*db_, filter.tenant_id.empty() ? nullptr : &filter.tenant_id, filter, opts);
}

Result<std::vector<JobRecord>> Store::ListLiveJobsForJobs() {
  return JobsWhere(*db_, kLiveStates, {});
}

Result<JobRecord> Store::GetJobForJobs(const std::string& id) {
  return OneJob(JobsWhere(*db_, "id = $1", {id}));
}

Result<JobRecord> Store::FindJobByAllocationForJobs(const std::string& allocation_id) {
  return OneJob(JobsWhere(*db_, "allocation_id = $1", {allocation_id}));
}

Result<std::vector<JobRecord>> Store::ListTenantJobsForJobs(const std::string& tenant_id) {
  return JobsWhere(*db_, "tenant_id = $1", {tenant_id});
}

Result<int64_t> Store::CountLiveJobsPinningForTemplates(const std::string& owner_tenant_id,
                                                        const std::string& pinned) {
  // The spec is canonical JSON (no spaces): LIKE narrows the rows to those
  // that may pin it, and reading each spec's own "environment" rules out
  // the same words elsewhere in it (a command argument, an env name).
  std::string q =
      std::string("SELECT spec FROM jobs WHERE ") + kLiveStates + " AND spec LIKE $1 ESCAPE '\\'";
  std::vector<Value> params = {ContainsPattern("\"environment\":" + Json(pinned).dump())};
  if (!owner_tenant_id.empty()) {
    params.push_back(owner_tenant_id);
    q += " AND tenant_id = $2";
  }
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  int64_t count = 0;
  for (const auto& r : rows.rows) {
    const Json spec = Json::parse(r.Text(0), nullptr, false);
    if (!spec.is_object()) continue;
    auto env = spec.find("environment");
    if (env != spec.end() && env->is_string() && env->get<std::string>() == pinned) ++count;
  }
  return count;
}

}  // namespace atrium
