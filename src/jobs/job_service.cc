#include "jobs/job_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "common/strings.h"
#include "crypto/ids.h"
#include "threads/thread_name.h"

namespace atrium::jobs {

namespace {

std::string JobTarget(const JobRecord& job) { return "tenant/" + job.tenant_id + "/job/" + job.id; }

RequestOrigin SystemOrigin() { return RequestOrigin{.actor = kJobsActor}; }

// The words of how a workload ended, for the event's reason.
std::string EndDetail(const exec::WorkloadStatus& st) {
  std::string d;
  if (st.phase == exec::WorkloadPhase::kExited) {
    d = st.signal != 0 ? "signal " + std::to_string(st.signal)
                       : "exit code " + std::to_string(st.exit_code);
  }
  if (!st.detail.empty()) d += (d.empty() ? "" : "; ") + st.detail;
  return d;
}

}  // namespace

// One job's row as it will be written, with the events and audit records
// of the transitions that got it there.
struct JobService::Change {
  JobRecord job;
  std::vector<JobEventRecord> events;
  std::vector<AuditRecord> audit;

  // Applies `cause` (the transition table's rule) at `now`, recorded as
  // `by` (request id and source only when `by` asked in this request).
  Status Move(Cause cause, int64_t now, const RequestOrigin& by, const std::string& detail = "") {
    ATRIUM_ASSIGN_OR_RETURN(JobState from, [&]() -> Result<JobState> {
      auto s = ParseState(job.state);
      if (!s) return Error::Internal("job " + job.id + " has unknown state " + job.state);
      return *s;
    }());
    ATRIUM_ASSIGN_OR_RETURN(TransitionRule rule, Transition(from, cause));
    std::string reason(rule.reason);
    if (!detail.empty()) reason += ": " + detail;
    job.state = std::string(StateName(rule.to));
    job.reason = reason;
    job.updated_at = now;
    events.push_back({job.id, job.tenant_id, 0, now, job.attempt, std::string(StateName(from)),
                      job.state, reason, by.actor});
    AuditRecord a;
    a.time = now;
    a.actor = by.actor;
    a.actor_role = by.actor_role;
    a.tenant_id = job.tenant_id;
    // The service's own records are "jobs.*" (as the scheduler's are
    // "scheduler.*"); the API's route records are "job.*".
    a.action = cause == Cause::kRequeued ? "jobs.requeued" : "jobs." + job.state;
    a.target = JobTarget(job);
    a.outcome = "allowed";
    a.request_id = by.request_id;
    a.source = by.source;
    audit.push_back(std::move(a));
    return OkStatus();
  }
};

// One job's claim: while it is held, no other operation changes the job.
// kWait waits for another holder to finish; kTry gives up (held() false).
class JobService::Claim {
 public:
  enum class Mode { kWait, kTry };
  Claim(JobService& service, std::string job_id, Mode mode, bool by_tick = false)
      : service_(service), job_id_(std::move(job_id)), by_tick_(by_tick) {
    std::unique_lock<std::mutex> lock(service_.mu_);
    if (mode == Mode::kWait) {
      service_.claim_cv_.wait(lock, [this] { return !service_.claimed_.contains(job_id_); });
    } else if (service_.claimed_.contains(job_id_)) {
      return;
    }
    service_.claimed_.insert(job_id_);
    held_ = true;
  }
  ~Claim() {
    if (!held_) return;
    {
      std::lock_guard<std::mutex> lock(service_.mu_);
      service_.claimed_.erase(job_id_);
      if (!by_tick_) ++service_.other_changes_;
    }
    service_.claim_cv_.notify_all();
  }
  Claim(const Claim&) = delete;
  Claim& operator=(const Claim&) = delete;

  bool held() const { return held_; }

 private:
  JobService& service_;
  const std::string job_id_;
  const bool by_tick_;
  bool held_ = false;
};

JobService::JobService(Store& store, scheduling::SchedulingService& scheduling,
                       exec::ExecutionBackend& backend, const Clock& clock,
                       JobServiceOptions options)
    : store_(store),
      scheduling_(scheduling),
      backend_(backend),
      clock_(clock),
      options_(std::move(options)),
      reconcile_("jobs-reconcile", options_.tick_ms, [this] {
        if (auto s = Tick(); !s) spdlog::warn("jobs: reconcile: {}", s.error().message);
      }) {}

JobService::~JobService() { Stop(); }

Status JobService::Start() {
  {
    ATRIUM_ASSIGN_OR_RETURN(std::vector<exec::WorkloadStatus> known, backend_.List());
    for (const exec::WorkloadStatus& st : known) {
      const size_t dot = st.workload_id.rfind('.');
      const std::string job_id = st.workload_id.substr(0, dot);
      int64_t attempt = 0;
      if (dot != std::string::npos) {
        try {
          attempt = std::stoll(st.workload_id.substr(dot + 1));
        } catch (...) {
          attempt = 0;
        }
      }
      const bool alive =
          st.phase == exec::WorkloadPhase::kStarting || st.phase == exec::WorkloadPhase::kRunning;
      auto job = store_.GetJobForJobs(job_id);
      if (!job.has_value()) {
        if (job.error().code != ErrorCode::kNotFound) return std::move(job).error();
        // Its job is gone with its tenant: nothing may keep running or be
        // kept for it.
        spdlog::warn("jobs: workload {} has no job; stopping and forgetting it", st.workload_id);
        if (alive) (void)backend_.Stop(st.workload_id, 0);
        std::lock_guard<std::mutex> lock(mu_);
        to_forget_.insert(st.workload_id);
      } else if (attempt < job->attempt ||
                 !IsLive(ParseState(job->state).value_or(JobState::kLost))) {
        // An attempt whose end is stored (or that the job moved past: a
        // crash before its stop): its processes stop, what it holds on the
        // node is released once it is gone, its log stays readable.
        if (alive) (void)backend_.Stop(st.workload_id, 0);
        std::lock_guard<std::mutex> lock(mu_);
        to_release_.insert(st.workload_id);
      }
      // The current attempt is adopted by the Tick below: running ones are
      // watched, ended ones recorded with their real end.
    }
  }
  const bool threaded = options_.tick_ms > 0 && !reconcile_.running();
  if (threaded) {
    // Hints are taken only with the thread that acts on them.
    scheduling_.SetAllocationsChanged(
        [this](const std::vector<std::string>& ids) { HintAllocations(ids); });
    if (auto watching = backend_.WatchEnds([this](const std::string& workload_id) {
          HintJob(workload_id.substr(0, workload_id.rfind('.')), /*end=*/true);
        });
        !watching) {
      spdlog::warn("jobs: the {} backend cannot tell ends at once ({}); they are seen every {} ms",
                   backend_.name(), watching.error().message, options_.tick_ms);
    }
  }
  ATRIUM_RETURN_IF_ERROR(Tick());
  if (threaded) {
    {
      std::lock_guard<std::mutex> lock(timer_mu_);
      stopping_ = false;
    }
    reconcile_.Start();
    hints_ = std::thread([this] { HintLoop(); });
  }
  return OkStatus();
}

void JobService::Stop() {
  backend_.StopWatchingEnds();
  scheduling_.SetAllocationsChanged(nullptr);
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    stopping_ = true;
  }
  reconcile_.Stop();
  hint_cv_.notify_all();
  if (hints_.joinable()) hints_.join();
  log_cv_.notify_all();
}

void JobService::HintJob(const std::string& job_id, bool end) {
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    Hint& hint = hinted_jobs_[job_id];
    hint.due = std::chrono::steady_clock::now();
    hint.looks = 0;
    hint.end = hint.end || end;
    hinted_now_ = true;
  }
  hint_cv_.notify_all();
}

void JobService::HintAllocations(const std::vector<std::string>& allocation_ids) {
  {
    std::lock_guard<std::mutex> lock(timer_mu_);
    hinted_allocations_.insert(allocation_ids.begin(), allocation_ids.end());
    hinted_now_ = true;
  }
  hint_cv_.notify_all();
}

void JobService::HintLoop() {
  NameThisThread("jobs-hints");
  using Steady = std::chrono::steady_clock;
  std::unique_lock<std::mutex> lock(timer_mu_);
  while (!stopping_) {
    auto wake = Steady::time_point::max();
    for (const auto& [id, hint] : hinted_jobs_) wake = std::min(wake, hint.due);
    auto ready = [this] { return stopping_ || hinted_now_; };
    if (wake == Steady::time_point::max()) {
      hint_cv_.wait(lock, ready);
    } else {
      hint_cv_.wait_until(lock, wake, ready);
    }
    if (stopping_) break;
    hinted_now_ = false;
    const auto now = Steady::now();
    std::vector<std::string> allocations(hinted_allocations_.begin(), hinted_allocations_.end());
    hinted_allocations_.clear();
    std::vector<std::pair<std::string, Hint>> due;
    for (auto it = hinted_jobs_.begin(); it != hinted_jobs_.end();) {
      if (it->second.due <= now) {
        due.emplace_back(it->first, it->second);
        it = hinted_jobs_.erase(it);
      } else {
        ++it;
      }
    }
    lock.unlock();
    for (const std::string& allocation : allocations) {
      auto job = store_.FindJobByAllocationForJobs(allocation);
      if (job.has_value()) ReconcileHinted(job->id, Hint{now, 0, false});
    }
    for (const auto& [id, hint] : due) ReconcileHinted(id, hint);
    lock.lock();
  }
}

void JobService::ReconcileHinted(const std::string& job_id, Hint hint) {
  // Looks after an end was heard: 50 ms, then twice as long each time; the
  // tick covers whatever outlasts them.
  constexpr int kMaxLooks = 6;
  constexpr auto kFirstWait = std::chrono::milliseconds(50);
  auto look_again = [&] {
    if (hint.looks >= kMaxLooks) return;
    {
      std::lock_guard<std::mutex> lock(timer_mu_);
      // A hint that came meanwhile stays as it is: it is looked at first.
      hinted_jobs_.try_emplace(
          job_id, Hint{std::chrono::steady_clock::now() + kFirstWait * (1 << hint.looks),
                       hint.looks + 1, hint.end});
    }
    hint_cv_.notify_all();
  };
  {
    Claim claim(*this, job_id, Claim::Mode::kTry);
    if (!claim.held()) {
      look_again();  // another operation changes it now
      return;
    }
    auto job = store_.GetJobForJobs(job_id);
    if (!job.has_value()) return;  // not a job (any more)
    auto state = ParseState(job->state);
    if (!state || !IsLive(*state)) return;
    if (auto s = ReconcileClaimed(std::move(*job)); !s) {
      spdlog::warn("jobs: job {}: {}", job_id, s.error().message);
    }
    if (hint.end) {
      auto now = store_.GetJobForJobs(job_id);
      auto now_state = now.has_value() ? ParseState(now->state) : std::nullopt;
      if (now_state && IsLive(*now_state) && *now_state != JobState::kPending) look_again();
    }
  }
  log_cv_.notify_all();
}

Status JobService::Tick() {
  Status first = OkStatus();
  {
    std::lock_guard<std::mutex> ticking(tick_mu_);
    ForgetGone();
    ReleaseEnded();
    auto other_changes = [this] {
      std::lock_guard<std::mutex> lock(mu_);
      return other_changes_;
    };
    const uint64_t listed_after = other_changes();
    auto live = store_.ListLiveJobsForJobs();
    if (!live.has_value()) return std::move(live).error();
    // Every started job's workload in one look (Slurm: one scontrol for
    // all, not one per job each tick). What it misses, or all of it when
    // the look fails, each job asks on its own.
    std::vector<std::string> started;
    for (const JobRecord& job : *live) {
      const auto state = ParseState(job.state);
      if (state && *state != JobState::kPending) started.push_back(job.workload_id());
    }
    std::map<std::string, exec::WorkloadStatus> seen;
    if (!started.empty()) {
      auto looked = backend_.InspectMany(started);
      if (looked.has_value()) {
        seen = std::move(*looked);
      } else {
        spdlog::warn("jobs: cannot look at {} workloads at once: {}", started.size(),
                     looked.error().message);
      }
    }
    for (JobRecord& job : *live) {
      const std::string id = job.id;
      Claim claim(*this, id, Claim::Mode::kTry, /*by_tick=*/true);
      if (!claim.held()) continue;  // another operation changes it now: the next tick sees it
      if (other_changes() != listed_after) {
        // Another operation may have changed it since the list: act on
        // the row as it is now.
        auto now = store_.GetJobForJobs(id);
        if (!now.has_value()) {
          if (now.error().code == ErrorCode::kNotFound) continue;  // deleted with its tenant
          if (first.has_value()) first = Status(std::move(now).error());
          continue;
        }
        job = std::move(*now);
      }
      auto it = seen.find(job.workload_id());
      if (auto s = ReconcileClaimed(std::move(job), it != seen.end() ? &it->second : nullptr); !s) {
        spdlog::warn("jobs: job {}: {}", id, s.error().message);
        if (first.has_value()) first = std::move(s);
      }
    }
  }
  log_cv_.notify_all();
  return first;
}

void JobService::ForgetGone() {
  // At most this many backend looks per Tick: a restart that finds
  // thousands of orphans (a Slurm folder another control plane used) forgets
  // them over the next ticks instead of holding up its start and every job.
  constexpr size_t kForgetsPerTick = 32;
  std::lock_guard<std::mutex> forgetting(forget_mu_);
  std::vector<std::string> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Round the set from where the last pass stopped, so workloads that
    // outlive their stop never keep the others waiting.
    auto it = to_forget_.upper_bound(forget_cursor_);
    while (pending.size() < std::min(kForgetsPerTick, to_forget_.size())) {
      if (it == to_forget_.end()) it = to_forget_.begin();
      pending.push_back(*it++);
    }
    forget_cursor_ = pending.empty() ? std::string() : pending.back();
  }
  std::vector<std::string> done;
  for (const std::string& wid : pending) {
    auto st = backend_.Inspect(wid);
    if (!st.has_value()) {
      if (st.error().code == ErrorCode::kNotFound) done.push_back(wid);
    } else if (st->phase == exec::WorkloadPhase::kExited ||
               st->phase == exec::WorkloadPhase::kLost) {
      if (backend_.Forget(wid).has_value()) done.push_back(wid);
    } else {
      (void)backend_.Stop(wid, 0);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& wid : done) to_forget_.erase(wid);
}

void JobService::ReleaseEnded() {
  std::vector<std::string> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.assign(to_release_.begin(), to_release_.end());
  }
  std::vector<std::string> done;
  for (const std::string& wid : pending) {
    auto released = backend_.Release(wid);
    if (released.has_value() || released.error().code == ErrorCode::kNotFound) {
      done.push_back(wid);
    } else if (released.error().code != ErrorCode::kFailedPrecondition) {
      spdlog::warn("jobs: cannot release workload {} yet: {}", wid, released.error().message);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& wid : done) to_release_.erase(wid);
}

bool JobService::StopSent(const std::string& workload_id) {
  std::lock_guard<std::mutex> lock(mu_);
  return stops_sent_.contains(workload_id);
}

void JobService::SetStopSent(const std::string& workload_id, bool sent) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sent) {
    stops_sent_.insert(workload_id);
  } else {
    stops_sent_.erase(workload_id);
  }
}

Result<JobSpec> JobService::SpecOf(const JobRecord& job) const {
  auto parsed = ParseJson(job.spec);
  if (!parsed.has_value()) return Error::Internal("job " + job.id + " has an unreadable spec");
  auto spec = ReadJobSpec(*parsed, options_.limits, SpecOrigin::kPlatform);
  if (!spec.has_value()) {
    return Error::Internal("job " + job.id +
                           " has a spec it no longer passes: " + spec.error().message);
  }
  return spec;
}

// ------------------------------------------------------------------ submit

Result<JobService::Submitted> JobService::Submit(const RequestOrigin& by,
                                                 const std::string& tenant_id,
                                                 const std::string& user_id, const JobSpec& spec,
                                                 const std::string& idempotency_key) {
  // The stored form is the canonical one, read back under this service's
  // limits: what is stored is exactly what a requeue will submit.
  ATRIUM_ASSIGN_OR_RETURN(JobSpec accepted,
                          ReadJobSpec(JobSpecJson(spec), options_.limits, SpecOrigin::kPlatform));
  if (idempotency_key.size() > 255) {
    return Error::InvalidArgument("the idempotency key is longer than 255 bytes");
  }
  const TenantScope scope = TenantScope::Of(tenant_id);

  auto same_request = [&](const JobRecord& earlier) -> Result<Submitted> {
    auto earlier_spec = SpecOf(earlier);
    JobSpec asked = accepted;
    // A template named without a version was pinned at the first
    // submission; the retry means the same job.
    if (earlier_spec.has_value() && !asked.environment.empty() &&
        asked.environment.find('@') == std::string::npos &&
        StartsWith(earlier_spec->environment, asked.environment + "@")) {
      asked.environment = earlier_spec->environment;
    }
    if (earlier_spec.has_value() && *earlier_spec == asked) return Submitted{earlier, false};
    return Error::AlreadyExists("the idempotency key was used for a different job (" + earlier.id +
                                ")");
  };
  if (!idempotency_key.empty()) {
    auto earlier = store_.GetJobByIdempotencyKey(scope, idempotency_key);
    if (earlier.has_value()) return same_request(*earlier);
    if (earlier.error().code != ErrorCode::kNotFound) return std::move(earlier).error();
  }

  if (!accepted.project.empty()) {
    auto project = store_.GetProject(scope, accepted.project);
    if (!project.has_value()) {
      if (project.error().code == ErrorCode::kNotFound) {
        return Error::InvalidArgument("project '" + accepted.project + "' does not exist");
      }
      return std::move(project).error();
    }
  }
  if (!accepted.environment.empty()) {
    if (!options_.resolve_environment) {
      return Error::FailedPrecondition(
          "this server has no environment templates; submit the job without 'environment'");
    }
    ATRIUM_ASSIGN_OR_RETURN(ResolvedEnvironment env,
                            options_.resolve_environment(tenant_id, accepted.environment));
    accepted.environment = env.pinned;  // no drift between attempts
  }
  if (!accepted.archive.empty()) {
    if (!options_.resolve_archive) {
      return Error::FailedPrecondition(
          "this server takes no archives; submit the job with an inline script instead");
    }
    ATRIUM_RETURN_IF_ERROR(
        options_.resolve_archive(tenant_id, accepted.archive, accepted.archive_bytes));
  }

  const int64_t now = clock_.NowMillis();
  JobRecord job;
  job.id = NewId("job", clock_);
  job.tenant_id = tenant_id;
  job.project = accepted.project;
  job.name = accepted.name;
  job.created_by = user_id;
  job.state = "pending";
  job.allocation_id = NewId("alloc", clock_);
  job.spec = JobSpecJson(accepted).dump();
  job.idempotency_key = idempotency_key;
  job.reason = "submitted";
  job.created_at = now;
  job.updated_at = now;
  JobEventRecord event{job.id, tenant_id, 0, now, 1, "", "pending", "submitted", by.actor};
  AuditRecord audit;
  audit.time = now;
  audit.actor = by.actor;
  audit.actor_role = by.actor_role;
  audit.tenant_id = tenant_id;
  audit.action = "jobs.submitted";
  audit.target = JobTarget(job);
  audit.outcome = "allowed";
  audit.request_id = by.request_id;
  audit.source = by.source;
  // Claimed before the row exists: a Tick never finds the new job
  // unclaimed before this submission has submitted and started it.
  Claim claim(*this, job.id, Claim::Mode::kWait);
  auto created = store_.CreateJob(job, event, audit);
  if (!created.has_value()) {
    if (created.error().code == ErrorCode::kAlreadyExists && !idempotency_key.empty()) {
      // Another request with the same key got there first.
      auto earlier = store_.GetJobByIdempotencyKey(scope, idempotency_key);
      if (earlier.has_value()) return same_request(*earlier);
    }
    return std::move(created).error();
  }

  // The row holds the allocation's id: from here a crash loses nothing.
  if (auto submitted = SubmitAllocationClaimed(job); !submitted) {
    if (submitted.error().code == ErrorCode::kUnavailable) {
      // Submitted again by the reconcile.
      return Submitted{job, true};
    }
    return std::move(submitted).error();
  }
  auto stored = store_.GetJob(scope, job.id);
  if (!stored.has_value()) return std::move(stored).error();
  // Placed at once: start it now rather than at the next tick.
  if (auto s = ReconcileClaimed(*stored); !s) {
    spdlog::warn("jobs: job {}: {}", job.id, s.error().message);
  }
  ATRIUM_ASSIGN_OR_RETURN(JobRecord now_row, store_.GetJob(scope, job.id));
  return Submitted{std::move(now_row), true};
}

Status JobService::SubmitAllocationClaimed(const JobRecord& job) {
  ATRIUM_ASSIGN_OR_RETURN(JobSpec spec, SpecOf(job));
  sched::AllocationRequest request = spec.resources;
  request.id = job.allocation_id;
  if (!spec.environment.empty() && options_.resolve_environment) {
    // The pinned version's requirements: the job is placed only on nodes
    // that run what its environment needs.
    auto env = options_.resolve_environment(job.tenant_id, spec.environment);
    if (!env.has_value()) {
      if (env.error().code == ErrorCode::kUnavailable) return std::move(env).error();
      ATRIUM_RETURN_IF_ERROR(
          EndWithoutWorkloadClaimed(job, Cause::kAllocationRejected, env.error().message));
      return std::move(env).error();
    }
    request.requirements = env->requirements;
  }
  auto a = scheduling_.Submit(SystemOrigin(), job.tenant_id, job.created_by, std::move(request));
  if (a.has_value()) return OkStatus();
  Error e = std::move(a).error();
  if (e.code == ErrorCode::kAlreadyExists) return OkStatus();  // submitted before a crash
  if (e.code == ErrorCode::kUnavailable || e.code == ErrorCode::kInternal) return e;
  // Refused for good (never fits, unknown project, too many pending, the
  // tenant is suspended): the job ends with the scheduler's words.
  ATRIUM_RETURN_IF_ERROR(EndWithoutWorkloadClaimed(job, Cause::kAllocationRejected, e.message));
  return e;
}

// ------------------------------------------------------------------ reconcile

Status JobService::ReconcileClaimed(JobRecord job, const exec::WorkloadStatus* seen) {
  auto state = ParseState(job.state);
  if (!state) return Error::Internal("job " + job.id + " has unknown state " + job.state);
  if (*state == JobState::kPending) return ReconcilePendingClaimed(std::move(job));
  if (!IsLive(*state)) return OkStatus();

  const TenantScope scope = TenantScope::Of(job.tenant_id);
  auto allocation = store_.GetAllocation(scope, job.allocation_id);
  if (!allocation.has_value() && allocation.error().code != ErrorCode::kNotFound) {
    return std::move(allocation).error();
  }
  auto status = seen != nullptr && seen->workload_id == job.workload_id()
                    ? Result<exec::WorkloadStatus>(*seen)
                    : backend_.Inspect(job.workload_id());
  exec::WorkloadStatus st;
  if (status.has_value()) {
    st = *status;
  } else if (status.error().code == ErrorCode::kNotFound) {
    st.workload_id = job.workload_id();
    st.phase = exec::WorkloadPhase::kLost;
    st.detail = "the backend does not know the workload";
  } else {
    return std::move(status).error();
  }
  if (st.phase == exec::WorkloadPhase::kExited || st.phase == exec::WorkloadPhase::kLost) {
    return FinishAttemptClaimed(job, st, allocation);
  }

  const int64_t now = clock_.NowMillis();
  if (*state == JobState::kStarting && st.phase == exec::WorkloadPhase::kRunning) {
    Change change{job, {}, {}};
    ATRIUM_RETURN_IF_ERROR(change.Move(Cause::kWorkloadRunning, now, SystemOrigin()));
    change.job.started_ms = st.started_ms >= 0 ? st.started_ms : now;
    ATRIUM_RETURN_IF_ERROR(store_.CommitJob(change.job, change.events, std::move(change.audit)));
    job = change.job;
  }

  if (!job.stop_cause.empty()) {
    // A stop asked before this process started: ask again with what is
    // left of its grace.
    if (!StopSent(job.workload_id())) {
      ATRIUM_RETURN_IF_ERROR(
          backend_.Stop(job.workload_id(), std::max<int64_t>(0, job.stop_deadline_ms - now)));
      SetStopSent(job.workload_id(), true);
    }
    return OkStatus();
  }
  if (!allocation.has_value()) {
    return RequestStopClaimed(std::move(job), "allocation-released", 0, kJobsActor);
  }
  if (allocation->state == "preempting") {
    return RequestStopClaimed(std::move(job), "preemption",
                              std::max<int64_t>(0, allocation->preempt_at_ms - now), kJobsActor);
  }
  if (allocation->state == "preempted") {
    return RequestStopClaimed(std::move(job), "preemption", 0, kJobsActor);
  }
  if (!allocation->Held()) {
    return RequestStopClaimed(std::move(job), "allocation-released", 0, kJobsActor);
  }
  ATRIUM_ASSIGN_OR_RETURN(JobSpec spec, SpecOf(job));
  if (spec.time_limit_s > 0 && job.started_ms >= 0 &&
      now >= job.started_ms + spec.time_limit_s * 1000) {
    return RequestStopClaimed(std::move(job), "time-limit", options_.time_limit_grace_ms,
                              kJobsActor);
  }
  return OkStatus();
}

Status JobService::ReconcilePendingClaimed(JobRecord job) {
  const TenantScope scope = TenantScope::Of(job.tenant_id);
  auto allocation = store_.GetAllocation(scope, job.allocation_id);
  if (!allocation.has_value()) {
    if (allocation.error().code != ErrorCode::kNotFound) return std::move(allocation).error();
    // Stored, but its allocation never reached the scheduler (a crash or
    // an unavailable scheduler between the two): submit it now.
    ATRIUM_RETURN_IF_ERROR(SubmitAllocationClaimed(job));
    allocation = store_.GetAllocation(scope, job.allocation_id);
    if (!allocation.has_value()) {
      return allocation.error().code == ErrorCode::kNotFound
                 ? OkStatus()
                 : Status(std::move(allocation).error());
    }
    auto again = store_.GetJob(scope, job.id);  // a refusal ended it
    if (!again.has_value()) return std::move(again).error();
    if (again->state != "pending") return OkStatus();
  }
  const std::string& a = allocation->state;
  if (a == "pending" || a == "preempting") return OkStatus();  // wait
  if (a == "running") return LaunchClaimed(std::move(job), *allocation);
  if (a == "preempted") {
    return EndWithoutWorkloadClaimed(std::move(job), Cause::kPreempted, allocation->reason);
  }
  if (a == "rejected") {
    return EndWithoutWorkloadClaimed(std::move(job), Cause::kAllocationRejected,
                                     allocation->reason);
  }
  return EndWithoutWorkloadClaimed(std::move(job), Cause::kAllocationReleased, allocation->reason);
}

Status JobService::LaunchClaimed(JobRecord job, const AllocationRecord& allocation) {
  ATRIUM_ASSIGN_OR_RETURN(JobSpec spec, SpecOf(job));
  const int64_t now = clock_.NowMillis();
  auto refuse = [&](const Error& e) -> Status {
    ATRIUM_RETURN_IF_ERROR(ReleaseAllocationClaimed(job, SystemOrigin()));
    return EndWithoutWorkloadClaimed(job, Cause::kStartRefused, e.message);
  };
  ResolvedEnvironment env;
  if (!spec.environment.empty()) {
    if (!options_.resolve_environment) {
      return refuse(Error::FailedPrecondition("this server has no environment templates"));
    }
    auto resolved = options_.resolve_environment(job.tenant_id, spec.environment);
    if (!resolved.has_value()) {
      if (resolved.error().code == ErrorCode::kUnavailable) return std::move(resolved).error();
      return refuse(resolved.error());
    }
    env = *resolved;
  }
  std::string archive_path;
  if (!spec.archive.empty()) {
    if (!options_.resolve_archive) {
      return refuse(Error::FailedPrecondition("this server takes no archives"));
    }
    auto path = options_.resolve_archive(job.tenant_id, spec.archive, spec.archive_bytes);
    if (!path.has_value()) {
      if (path.error().code == ErrorCode::kUnavailable) return std::move(path).error();
      return refuse(path.error());
    }
    archive_path = *path;
  }
  auto launch = BuildLaunchSpec(job, spec, allocation, env, archive_path);
  if (!launch.has_value()) return refuse(launch.error());
  if (!options_.full_confinement_tiers.empty()) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant tenant, store_.GetTenant(job.tenant_id));
    launch->require_full_confinement = options_.full_confinement_tiers.contains(tenant.tier);
  }
  // Start before the row says starting: Start is idempotent by workload id,
  // so a crash between the two starts nothing twice.
  auto started = backend_.Start(*launch);
  if (!started.has_value()) {
    // A spec it cannot run safely ends the attempt at once; what may still
    // come (a mechanism the tenant's tier demands, a free workload uid) is
    // retried for start_retry_ms and then ends it too, with the backend's
    // words: the allocation would otherwise stay held and billed for ever.
    const ErrorCode code = started.error().code;
    const bool waited_enough =
        allocation.placed_ms >= 0 && now - allocation.placed_ms >= options_.start_retry_ms;
    if (code == ErrorCode::kInvalidArgument ||
        ((code == ErrorCode::kFailedPrecondition || code == ErrorCode::kResourceExhausted) &&
         waited_enough)) {
      return refuse(started.error());
    }
    return std::move(started).error();  // retried at the next tick
  }
  Change change{job, {}, {}};
  ATRIUM_RETURN_IF_ERROR(
      change.Move(Cause::kPlaced, now, SystemOrigin(),
                  "on " + launch->node + " (workload " + launch->workload_id + ")"));
  if (started->phase == exec::WorkloadPhase::kRunning) {
    ATRIUM_RETURN_IF_ERROR(change.Move(Cause::kWorkloadRunning, now, SystemOrigin()));
    change.job.started_ms = started->started_ms >= 0 ? started->started_ms : now;
  }
  return store_.CommitJob(change.job, change.events, std::move(change.audit));
}

Status JobService::ReleaseAllocationClaimed(const JobRecord& job, const RequestOrigin& by) {
  auto a = store_.GetAllocation(TenantScope::Of(job.tenant_id), job.allocation_id);
  if (!a.has_value()) {
    return a.error().code == ErrorCode::kNotFound ? OkStatus() : Status(std::move(a).error());
  }
  if (!a->Held()) return OkStatus();
  auto released = scheduling_.Release(by, job.tenant_id, job.allocation_id);
  if (!released.has_value() && released.error().code != ErrorCode::kFailedPrecondition) {
    return std::move(released).error();
  }
  return OkStatus();
}

Status JobService::FinishAttemptClaimed(const JobRecord& job, const exec::WorkloadStatus& st,
                                        const Result<AllocationRecord>& allocation) {
  ATRIUM_ASSIGN_OR_RETURN(Cause cause, CauseOfEnd(st, job.stop_cause));
  // The backend says every process is gone: only now do the GPUs go back.
  RequestOrigin by = SystemOrigin();
  if (job.stop_cause == "cancel" || job.stop_cause == "eviction") by.actor = job.stop_by;
  if (allocation.has_value()) {
    if (st.phase == exec::WorkloadPhase::kExited &&
        (allocation->state == "running" || allocation->state == "preempting")) {
      std::lock_guard<std::mutex> lock(mu_);
      // Bounded: a release the scheduler refused leaves its id behind (the
      // probe then asks the backend, as without this shortcut).
      if (ended_allocations_.size() >= 4096) ended_allocations_.clear();
      ended_allocations_.insert(job.allocation_id);
    }
    if (auto released = ReleaseAllocationClaimed(job, by); !released) {
      std::lock_guard<std::mutex> lock(mu_);
      ended_allocations_.erase(job.allocation_id);
      return released;
    }
  }
  Change change{job, {}, {}};
  ATRIUM_RETURN_IF_ERROR(change.Move(cause, clock_.NowMillis(), by, EndDetail(st)));
  change.job.exit_code = st.phase == exec::WorkloadPhase::kExited ? st.exit_code : -1;
  change.job.signal = st.phase == exec::WorkloadPhase::kExited ? st.signal : 0;
  change.job.ended_ms = st.ended_ms >= 0 ? st.ended_ms : clock_.NowMillis();
  // A workload that ran and ended between two looks was never seen
  // running: its start is the backend's.
  if (change.job.started_ms < 0 && st.started_ms >= 0) {
    change.job.started_ms = std::min(st.started_ms, change.job.ended_ms);
  }
  SetStopSent(job.workload_id(), false);
  ATRIUM_RETURN_IF_ERROR(CommitEndClaimed(change, cause));
  // The end is stored: what the workload held on the node goes back now
  // (retried by every Tick while the backend cannot).
  if (auto released = backend_.Release(job.workload_id());
      !released && released.error().code != ErrorCode::kNotFound) {
    std::lock_guard<std::mutex> lock(mu_);
    to_release_.insert(job.workload_id());
  }
  return OkStatus();
}

Status JobService::EndWithoutWorkloadClaimed(JobRecord job, Cause cause,
                                             const std::string& detail) {
  RequestOrigin by = SystemOrigin();
  if (cause == Cause::kCancelled || cause == Cause::kEvicted) by.actor = job.stop_by;
  Change change{std::move(job), {}, {}};
  ATRIUM_RETURN_IF_ERROR(change.Move(cause, clock_.NowMillis(), by, detail));
  change.job.ended_ms = clock_.NowMillis();
  return CommitEndClaimed(change, cause);
}

Status JobService::CommitEndClaimed(Change& change, Cause cause) {
  ATRIUM_ASSIGN_OR_RETURN(JobSpec spec, SpecOf(change.job));
  const bool requeue = DecideRestart(spec.restart, cause, change.job.restarts);
  // The ended attempt's run, which the requeued row no longer shows: kept
  // in the same transaction, so its GPU time is recorded (metering).
  std::vector<JobRunRecord> ended_runs;
  if (requeue && change.job.started_ms >= 0) {
    const JobRecord& j = change.job;
    ended_runs.push_back({j.id, j.attempt, j.tenant_id, j.project, j.allocation_id, j.started_ms,
                          j.ended_ms, clock_.NowMillis()});
  }
  if (requeue) {
    JobRecord& j = change.job;
    j.attempt += 1;
    j.restarts += 1;
    j.allocation_id = NewId("alloc", clock_);
    j.stop_cause.clear();
    j.stop_by.clear();
    j.stop_deadline_ms = -1;
    j.started_ms = -1;
    j.ended_ms = -1;
    ATRIUM_RETURN_IF_ERROR(change.Move(Cause::kRequeued, clock_.NowMillis(), SystemOrigin(),
                                       "attempt " + std::to_string(j.attempt) + " of at most " +
                                           std::to_string(spec.restart.max_restarts + 1)));
  }
  ATRIUM_RETURN_IF_ERROR(
      store_.CommitJob(change.job, change.events, std::move(change.audit), ended_runs));
  if (requeue) {
    // Stored first (with the new allocation's id), then submitted: a crash
    // between the two is mended by the next reconcile.
    auto s = SubmitAllocationClaimed(change.job);
    if (!s && s.error().code != ErrorCode::kUnavailable) return s;
  }
  return OkStatus();
}

Status JobService::RequestStopClaimed(JobRecord job, const std::string& cause, int64_t grace_ms,
                                      const std::string& actor) {
  const int64_t now = clock_.NowMillis();
  job.stop_cause = cause;
  job.stop_by = actor;
  job.stop_deadline_ms = now + grace_ms;
  job.updated_at = now;
  // Persisted before the backend is told, so the end is recorded as this
  // stop even if this process dies in between.
  ATRIUM_RETURN_IF_ERROR(store_.CommitJob(job, {}, {}));
  ATRIUM_RETURN_IF_ERROR(backend_.Stop(job.workload_id(), grace_ms));
  SetStopSent(job.workload_id(), true);
  return OkStatus();
}

// ------------------------------------------------------------------ cancel

Result<JobRecord> JobService::Cancel(const RequestOrigin& by, const std::string& tenant_id,
                                     const std::string& job_id) {
  const TenantScope scope = TenantScope::Of(tenant_id);
  // The tenant's job, or NotFound before anything waits on it; then its
  // row again under the claim (a Tick may have moved it meanwhile).
  ATRIUM_RETURN_IF_ERROR(store_.GetJob(scope, job_id));
  Claim claim(*this, job_id, Claim::Mode::kWait);
  ATRIUM_ASSIGN_OR_RETURN(JobRecord job, store_.GetJob(scope, job_id));
  auto state = ParseState(job.state);
  if (!state || !IsLive(*state)) {
    return Error::FailedPrecondition("job " + job_id + " is already " + job.state);
  }
  if (!job.stop_cause.empty()) return job;  // already stopping
  if (*state == JobState::kPending) {
    ATRIUM_RETURN_IF_ERROR(ReleaseAllocationClaimed(job, by));
    Change change{job, {}, {}};
    ATRIUM_RETURN_IF_ERROR(change.Move(Cause::kCancelled, clock_.NowMillis(), by));
    change.job.ended_ms = clock_.NowMillis();
    ATRIUM_RETURN_IF_ERROR(store_.CommitJob(change.job, change.events, std::move(change.audit)));
    return change.job;
  }
  ATRIUM_RETURN_IF_ERROR(RequestStopClaimed(job, "cancel", options_.cancel_grace_ms, by.actor));
  return store_.GetJob(scope, job_id);
}

// ------------------------------------------------------------------ eviction

Status JobService::StopTenantJobs(const std::string& tenant_id, const RequestOrigin& by) {
  ATRIUM_ASSIGN_OR_RETURN(std::vector<JobRecord> jobs, store_.ListTenantJobsForJobs(tenant_id));
  for (JobRecord& listed : jobs) {
    Claim claim(*this, listed.id, Claim::Mode::kWait);
    auto now = store_.GetJobForJobs(listed.id);
    if (!now.has_value()) {
      if (now.error().code == ErrorCode::kNotFound) continue;
      return std::move(now).error();
    }
    JobRecord& job = *now;
    for (int64_t attempt = 1; attempt <= job.attempt; ++attempt) {
      const std::string wid = job.id + "." + std::to_string(attempt);
      auto stopped = backend_.Stop(wid, 0);
      if (!stopped && stopped.error().code != ErrorCode::kNotFound) {
        return std::move(stopped).error();
      }
      std::lock_guard<std::mutex> lock(mu_);
      to_forget_.insert(wid);
    }
    {
      std::lock_guard<std::mutex> evicted(evicted_mu_);
      evicted_workloads_[job.allocation_id] = job.workload_id();
    }
    auto state = ParseState(job.state);
    if (state && IsLive(*state)) {
      job.stop_by = by.actor;
      Change change{job, {}, {}};
      ATRIUM_RETURN_IF_ERROR(change.Move(Cause::kEvicted, clock_.NowMillis(), by));
      change.job.stop_cause = "eviction";
      change.job.ended_ms = clock_.NowMillis();
      ATRIUM_RETURN_IF_ERROR(store_.CommitJob(change.job, change.events, std::move(change.audit)));
    }
  }
  ForgetGone();
  return OkStatus();
}

Status JobsTenantObserver::TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) {
  ATRIUM_RETURN_IF_ERROR(jobs_.StopTenantJobs(tenant_id, by));
  return next_.TenantEvicting(tenant_id, by);
}

// ------------------------------------------------------------------ reads

bool JobService::WorkloadsGone(const std::string& allocation_id) {
  {
    // Released by FinishAttemptClaimed once the backend said its workload
    // ended: no second look is needed (the scrub's probe comes at once).
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_allocations_.erase(allocation_id) > 0) return true;
  }
  std::string wid;
  auto job = store_.FindJobByAllocationForJobs(allocation_id);
  if (job.has_value()) {
    wid = job->workload_id();
  } else {
    if (job.error().code != ErrorCode::kNotFound) return false;  // cannot tell: not gone
    std::lock_guard<std::mutex> lock(evicted_mu_);
    auto it = evicted_workloads_.find(allocation_id);
    if (it == evicted_workloads_.end()) return true;  // no job ever ran on it
    wid = it->second;
  }
  auto st = backend_.Inspect(wid);
  if (!st.has_value()) return st.error().code == ErrorCode::kNotFound;
  // A lost workload's node is gone or unreachable: nothing can be waited for.
  return st->phase == exec::WorkloadPhase::kExited || st->phase == exec::WorkloadPhase::kLost;
}

Result<exec::LogChunk> JobService::ReadLog(const std::string& tenant_id, const std::string& job_id,
                                           int64_t attempt, int64_t offset, int64_t max_bytes,
                                           int64_t wait_ms) {
  ATRIUM_ASSIGN_OR_RETURN(JobRecord job, store_.GetJob(TenantScope::Of(tenant_id), job_id));
  if (attempt == 0) attempt = job.attempt;
  if (attempt < 1 || attempt > job.attempt) {
    return Error::InvalidArgument("attempt must be 1.." + std::to_string(job.attempt));
  }
  if (offset < 0) return Error::InvalidArgument("offset must not be negative");
  if (max_bytes < 1) return Error::InvalidArgument("max_bytes must be positive");
  max_bytes = std::min(max_bytes, options_.max_log_read_bytes);
  wait_ms = std::clamp<int64_t>(wait_ms, 0, options_.max_log_wait_ms);
  const bool waiter = wait_ms > 0 && EnterLogWait(tenant_id);
  if (!waiter) wait_ms = 0;
  struct LeaveOnReturn {
    JobService* service;
    const std::string& tenant;
    bool active;
    ~LeaveOnReturn() {
      if (active) service->LeaveLogWait(tenant);
    }
  } leave{this, tenant_id, waiter};
  const std::string wid = job.id + "." + std::to_string(attempt);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    auto chunk = backend_.ReadLog(wid, offset, max_bytes);
    if (!chunk.has_value()) {
      if (chunk.error().code != ErrorCode::kNotFound) return std::move(chunk).error();
      // Never started (or forgotten): an empty log, complete once the
      // attempt can no longer start.
      exec::LogChunk empty;
      empty.offset = offset;
      empty.next_offset = offset;
      auto now_job = store_.GetJob(TenantScope::Of(tenant_id), job_id);
      empty.complete = !now_job.has_value() || attempt < now_job->attempt ||
                       !IsLive(ParseState(now_job->state).value_or(JobState::kLost));
      chunk = empty;
    }
    if (!chunk->data.empty() || chunk->complete || std::chrono::steady_clock::now() >= deadline) {
      return chunk;
    }
    // Wait for the next reconcile (or the deadline), then read again.
    std::unique_lock<std::mutex> lock(log_mu_);
    log_cv_.wait_until(lock, deadline);
  }
}

bool JobService::EnterLogWait(const std::string& tenant_id) {
  std::lock_guard<std::mutex> lock(log_mu_);
  int& mine = tenant_waiters_[tenant_id];
  if (log_waiters_ >= options_.max_log_waiters || mine >= options_.max_log_waiters_per_tenant) {
    if (mine == 0) tenant_waiters_.erase(tenant_id);
    return false;
  }
  ++log_waiters_;
  ++mine;
  return true;
}

int JobService::log_waiters() {
  std::lock_guard<std::mutex> lock(log_mu_);
  return log_waiters_;
}

void JobService::LeaveLogWait(const std::string& tenant_id) {
  std::lock_guard<std::mutex> lock(log_mu_);
  --log_waiters_;
  auto it = tenant_waiters_.find(tenant_id);
  if (it != tenant_waiters_.end() && --it->second <= 0) tenant_waiters_.erase(it);
}

Result<std::string> JobService::Explain(const std::string& tenant_id, const std::string& job_id,
                                        sched::Scheduler::Audience audience) {
  const TenantScope scope = TenantScope::Of(tenant_id);
  ATRIUM_ASSIGN_OR_RETURN(JobRecord job, store_.GetJob(scope, job_id));
  const std::string head =
      "job " + job.id + " (attempt " + std::to_string(job.attempt) + ") is " + job.state;
  auto state = ParseState(job.state).value_or(JobState::kLost);
  if (state == JobState::kPending) {
    auto why = scheduling_.Explain(tenant_id, job.allocation_id, audience);
    if (!why.has_value()) {
      if (why.error().code != ErrorCode::kNotFound) return std::move(why).error();
      return head + ": its allocation " + job.allocation_id + " is being submitted";
    }
    return head + ": waiting for allocation " + job.allocation_id + ": " + *why;
  }
  if (IsLive(state)) {
    std::string where;
    auto a = store_.GetAllocation(scope, job.allocation_id);
    if (a.has_value()) {
      for (const auto& p : a->placement) {
        std::string gpus;
        for (int g : p.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
        where += (where.empty() ? "" : "; ") + p.node + " GPUs [" + gpus + "]";
      }
    }
    std::string out = head + " on " + (where.empty() ? "?" : where) + " (allocation " +
                      job.allocation_id + ", workload " + job.workload_id() + ")";
    if (!job.stop_cause.empty()) {
      out += "; stopping (" + job.stop_cause + "), SIGKILL at " +
             FormatTimestamp(job.stop_deadline_ms);
    }
    return out;
  }
  return head + " since " + FormatTimestamp(job.ended_ms) + ": " + job.reason;
}

}  // namespace atrium::jobs
