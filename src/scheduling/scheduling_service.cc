#include "scheduling/scheduling_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "capacity/fleet_spec.h"
#include "crypto/ids.h"
#include "scheduling/codec.h"

namespace atrium::scheduling {

namespace {
// How many recent requests make the placement policy's target workload, and
// how often (in accepted requests) it is refreshed. Refreshing re-scores
// every node once per request class, so not on every request.
constexpr int64_t kWorkloadSample = 2000;
constexpr int kWorkloadRefresh = 64;

std::string AllocationTarget(const std::string& tenant, const std::string& id) {
  return "tenant/" + tenant + "/allocation/" + id;
}

}  // namespace

SchedulingService::SchedulingService(Store& store, const Clock& clock, SchedulingOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      scrubber_(options_.scrub,
                [this](const ScrubJob& job, const ScrubOutcome& outcome) {
                  ScrubFinished(job, outcome);
                }),
      timer_("sched-timer", options_.tick_ms, [this] {
        if (auto ticked = Tick(); !ticked) {
          spdlog::warn("scheduler tick failed: {}", ticked.error().message);
        }
      }) {}

SchedulingService::~SchedulingService() { Stop(); }

Status SchedulingService::Start() {
  ATRIUM_RETURN_IF_ERROR(ValidateScrubOptions(options_.scrub));
  scrubber_.Start();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ATRIUM_RETURN_IF_ERROR(LoadLocked());
    started_ = true;
    // Scrubs a stop or a crash interrupted run again from the start.
    StartScrubsLocked();
    // Work on a draining node or an unhealthy GPU that nobody asked to move
    // yet (flags set while the service was down, or by hand in the store)
    // is asked now, once: the request is stored with the allocation.
    sched::DecisionRecords owed = scheduler_->RequestOutstandingMoves(clock_.NowMillis());
    if (!owed.empty()) {
      ATRIUM_RETURN_IF_ERROR(
          CommitLocked(RequestOrigin{.actor = kSchedulerActor}, owed, {}, nullptr, ""));
    }
  }
  timer_.Start();
  return OkStatus();
}

void SchedulingService::Stop() {
  // First, so no scrub finishes into a scheduler being torn down.
  scrubber_.Stop();
  timer_.Stop();
}

Status SchedulingService::LoadLocked() {
  ATRIUM_ASSIGN_OR_RETURN(std::optional<FleetRecord> stored, store_.LoadFleet());
  std::string spec;
  std::optional<capacity::Fleet> fleet;
  bool replace = false;
  if (options_.fleet) {
    FleetRecord given = *options_.fleet;
    if (stored && stored->spec == given.spec) given = WithStoredOperatorFlags(given, *stored);
    ATRIUM_ASSIGN_OR_RETURN(fleet, FleetFromRecord(given));
    spec = given.spec;
    replace = true;
  } else if (stored && (options_.fleet_spec.empty() || options_.fleet_spec == stored->spec)) {
    ATRIUM_ASSIGN_OR_RETURN(fleet, FleetFromRecord(*stored));
    spec = stored->spec;
  } else {
    spec = options_.fleet_spec.empty() ? std::string(capacity::kDefaultDevFleetSpec)
                                       : options_.fleet_spec;
    ATRIUM_ASSIGN_OR_RETURN(fleet, capacity::ParseFleetSpec(spec));
    replace = true;
  }
  FleetRecord fleet_record = FleetToRecord(*fleet, spec);

  sched::SchedulerOptions opts;
  opts.grace_ms = options_.grace_ms;
  opts.policy = options_.policy;
  opts.max_pending_per_tenant = options_.max_pending_per_tenant;
  opts.max_pending_per_project = options_.max_pending_per_project;
  opts.scrub_gpus = true;
  ATRIUM_ASSIGN_OR_RETURN(auto scheduler, sched::Scheduler::Create(std::move(*fleet), opts));

  ATRIUM_ASSIGN_OR_RETURN(auto quotas, store_.ListAllQuotasForScheduler());
  ATRIUM_ASSIGN_OR_RETURN(auto projects, store_.ListAllProjectsForScheduler());
  const int64_t now = clock_.NowMillis();
  std::set<std::string> tenants;
  std::map<std::string, sched::TenantPolicy> requested;
  ListOptions page{.after = "", .limit = 1000};
  while (true) {
    ATRIUM_ASSIGN_OR_RETURN(auto tenant_page, store_.ListTenants({}, page));
    for (const Tenant& t : tenant_page.items) {
      ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyFromRecords(t, quotas, projects));
      ATRIUM_RETURN_IF_ERROR(scheduler->SetTenant(sched::ClampProjectSplit(policy).policy, now));
      requested[t.id] = std::move(policy);
      tenants.insert(t.id);
    }
    if (tenant_page.next_cursor.empty()) break;
    page.after = tenant_page.next_cursor;
  }

  ATRIUM_ASSIGN_OR_RETURN(auto held, store_.ListHeldAllocationsForScheduler());
  std::vector<sched::Allocation> restore;
  std::map<std::string, std::string> creators;
  for (const AllocationRecord& r : held) {
    if (!tenants.contains(r.tenant_id)) {
      spdlog::warn("allocation {} belongs to no stored tenant ({}); not restored", r.id,
                   r.tenant_id);
      continue;
    }
    ATRIUM_ASSIGN_OR_RETURN(sched::Allocation a, AllocationFromRecord(r));
    restore.push_back(std::move(a));
    creators[r.id] = r.created_by;
  }
  ATRIUM_ASSIGN_OR_RETURN(auto scrub_rows, store_.ListGpuScrubsForScheduler());
  std::vector<sched::ScrubHold> scrubs;
  for (const GpuScrubRecord& r : scrub_rows) {
    ATRIUM_ASSIGN_OR_RETURN(sched::ScrubHold h, ScrubFromRecord(r));
    scrubs.push_back(std::move(h));
  }
  if (auto restored = scheduler->Restore(restore, scrubs); !restored) {
    Error e = std::move(restored).error();
    if (stored && replace) {
      e.code = ErrorCode::kFailedPrecondition;
      e.message = "the stored fleet was built from '" + stored->spec + "' and the fleet '" + spec +
                  "' cannot hold its allocations (" + e.message + "); start with the stored " +
                  "fleet spec, or release those allocations first";
    }
    return e;
  }
  if (replace) {
    if (stored && stored->spec != spec) {
      spdlog::warn("fleet '{}' replaces the stored fleet '{}'; node flags start clear", spec,
                   stored->spec);
    }
    fleet_record.updated_at = now;
    ATRIUM_RETURN_IF_ERROR(store_.ReplaceFleet(fleet_record));
  }
  // Restore charges what an allocation stored under an older charge rule
  // (MIG before whole sevenths) costs now; the rows say the same, so that
  // what a tenant reads adds up to the usage its quota is checked against.
  SchedulingCommit recharged;
  for (const AllocationRecord& r : held) {
    const sched::Allocation* a = scheduler->Find(r.id);
    if (a == nullptr || a->charge_milli == r.charge_milli) continue;
    AllocationRecord updated = r;
    updated.charge_milli = a->charge_milli;
    updated.updated_at = now;
    recharged.allocations.push_back(std::move(updated));
  }
  if (!recharged.allocations.empty()) {
    ATRIUM_RETURN_IF_ERROR(store_.CommitScheduling(recharged));
    spdlog::info("scheduler: {} allocations stored with an older charge now charged as today",
                 recharged.allocations.size());
  }
  // The placement policy aims at the recent request mix, read back from the
  // store so that a restart aims at the same one.
  ATRIUM_ASSIGN_OR_RETURN(auto recent, store_.ListRecentAllocationsForScheduler(kWorkloadSample));
  recent_.clear();
  for (const AllocationRecord& r : recent) {
    auto a = AllocationFromRecord(r);
    if (a.has_value()) recent_.push_back(std::move(a->request));
  }
  scheduler->SetWorkload({recent_.begin(), recent_.end()});
  submitted_since_refresh_ = 0;
  scheduler_ = std::move(scheduler);
  requested_ = std::move(requested);
  fleet_spec_ = spec;
  creators_ = std::move(creators);
  stored_scrubs_.clear();
  for (sched::ScrubHold& h : scrubs) {
    stored_scrubs_.emplace(std::make_tuple(h.node, h.gpu, h.allocation), std::move(h));
  }
  spdlog::info("scheduler: fleet '{}' ({} nodes, {} GPUs), {} tenants, {} allocations restored",
               spec, scheduler_->fleet().nodes().size(), scheduler_->fleet().TotalGpus(),
               tenants.size(), restore.size());
  return OkStatus();
}

std::vector<sched::TypicalPod> SchedulingService::TargetWorkload() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return {};
  return scheduler_->workload();
}

void SchedulingService::NoteRequestLocked(const sched::AllocationRequest& request) {
  recent_.push_back(request);
  while (recent_.size() > static_cast<size_t>(kWorkloadSample)) recent_.pop_front();
  if (++submitted_since_refresh_ >= kWorkloadRefresh) {
    scheduler_->SetWorkload({recent_.begin(), recent_.end()});
    submitted_since_refresh_ = 0;
  }
}

Status SchedulingService::CommitLocked(const RequestOrigin& by,
                                       const sched::DecisionRecords& decisions,
                                       SchedulingCommit commit, const Subject& caused_by_caller,
                                       const std::string& caller_tenant,
                                       const std::string& new_allocation_id,
                                       const std::string& new_allocation_creator) {
  const int64_t now = clock_.NowMillis();
  // The last decision per allocation decides what its row says.
  std::vector<std::string> order;
  std::map<std::string, const sched::DecisionRecord*> last;
  for (const sched::DecisionRecord& d : decisions) {
    if (!last.contains(d.allocation_id)) order.push_back(d.allocation_id);
    last[d.allocation_id] = &d;
  }
  std::vector<std::string> ended;
  for (const std::string& id : order) {
    const sched::DecisionRecord& d = *last[id];
    if (const sched::Allocation* a = scheduler_->Find(id)) {
      std::string creator = id == new_allocation_id ? new_allocation_creator
                            : creators_.count(id)   ? creators_[id]
                                                    : "";
      AllocationRecord r = AllocationToRecord(*a, creator, now);
      r.reason = d.ToString();
      commit.allocations.push_back(std::move(r));
      continue;
    }
    if (id == new_allocation_id) continue;  // rejected on arrival: never stored
    auto existing = store_.GetAllocation(TenantScope::Of(d.tenant), id);
    if (!existing.has_value()) {
      if (existing.error().code == ErrorCode::kNotFound) continue;
      return existing.error();
    }
    AllocationRecord r = std::move(existing).value();
    const std::string_view ended_as = sched::EndedStateName(d.kind);
    r.state = ended_as.empty() ? "released" : std::string(ended_as);
    r.ended_ms = d.at_ms;
    r.reason = d.ToString();
    r.preempt_at_ms = -1;
    r.move_requested.clear();
    r.move_requested_ms = -1;
    r.updated_at = now;
    commit.allocations.push_back(std::move(r));
    ended.push_back(id);
  }
  for (const sched::DecisionRecord& d : decisions) {
    if (d.kind == sched::DecisionKind::kRejected && d.allocation_id == new_allocation_id) continue;
    AuditRecord a;
    a.time = now;
    const bool by_caller = caused_by_caller && caused_by_caller(d);
    if (by_caller) {
      a.actor = by.actor;
      a.actor_role = by.actor_role;
    } else {
      a.actor = kSchedulerActor;
    }
    a.tenant_id = d.tenant;
    a.action = "scheduler." + std::string(sched::DecisionKindName(d.kind));
    a.target = AllocationTarget(d.tenant, d.allocation_id);
    a.outcome = "allowed";
    // The caller's request id and address go only into its own tenant's
    // chain and onto what it did itself: a decision the pass made for
    // another tenant (a reclaim victim, a placement a release let in) must
    // not tell that tenant who asked, from where.
    if (by_caller || (!caller_tenant.empty() && d.tenant == caller_tenant)) {
      a.request_id = by.request_id;
      a.source = by.source;
    }
    commit.audit.push_back(std::move(a));
  }
  ScrubChangesLocked(commit);
  if (auto committed = store_.CommitScheduling(commit); !committed) {
    Error e = std::move(committed).error();
    spdlog::error("scheduler: persisting {} decisions failed ({}); reloading from the store",
                  decisions.size(), e.message);
    if (auto reloaded = LoadLocked(); !reloaded) {
      spdlog::error("scheduler: reload failed: {}", reloaded.error().message);
    }
    return e;
  }
  if (!new_allocation_id.empty() && scheduler_->Find(new_allocation_id)) {
    creators_[new_allocation_id] = new_allocation_creator;
  }
  for (const std::string& id : ended) creators_.erase(id);
  for (const std::string& id : order) {
    if (!scheduler_->Find(id)) creators_.erase(id);
  }
  stored_scrubs_.clear();
  for (sched::ScrubHold& h : scheduler_->Scrubs()) {
    stored_scrubs_.emplace(std::make_tuple(h.node, h.gpu, h.allocation), std::move(h));
  }
  if (changed_ && !order.empty()) changed_(order);
  if (started_) StartScrubsLocked();
  return OkStatus();
}

void SchedulingService::SetAllocationsChanged(AllocationsChanged listener) {
  std::lock_guard<std::mutex> lock(mu_);
  changed_ = std::move(listener);
}

// ------------------------------------------------------------------ scrub

void SchedulingService::ScrubChangesLocked(SchedulingCommit& commit) {
  std::set<std::tuple<std::string, int, std::string>> now;
  for (const sched::ScrubHold& h : scheduler_->Scrubs()) {
    auto key = std::make_tuple(h.node, h.gpu, h.allocation);
    now.insert(key);
    auto it = stored_scrubs_.find(key);
    if (it == stored_scrubs_.end() || !(it->second == h)) commit.scrubs.push_back(ScrubToRecord(h));
  }
  for (const auto& [key, h] : stored_scrubs_) {
    if (!now.contains(key)) commit.finished_scrubs.push_back(ScrubToRecord(h));
  }
}

void SchedulingService::StartScrubsLocked() {
  // Finishing one runs a pass and commits, which may end more allocations
  // (and call back here): take the list first.
  std::vector<sched::ScrubHold> immediate;
  for (const auto& [key, h] : stored_scrubs_) {
    if (h.state != sched::ScrubState::kScrubbing) continue;
    ScrubJob job{h.allocation,  h.node,      h.gpu,  h.model, std::string(sched::KindName(h.kind)),
                 h.mig_profile, h.mig_start, h.milli};
    auto argv = ScrubArgv(options_.scrub, job);
    if (!probe_set_ && argv.has_value() && argv->empty()) {
      immediate.push_back(h);
    } else {
      scrubber_.Enqueue(std::move(job));
    }
  }
  for (const sched::ScrubHold& h : immediate) {
    // Still held? (An earlier one's commit may have reloaded the scheduler.)
    if (!stored_scrubs_.contains(std::make_tuple(h.node, h.gpu, h.allocation))) continue;
    if (auto done = FinishScrubLocked(h, ScrubOutcome{true, ""}); !done) {
      spdlog::error("scrub of {} failed to commit: {}", sched::DescribeScrub(h),
                    done.error().message);
    }
  }
}

Status SchedulingService::FinishScrubLocked(const sched::ScrubHold& hold,
                                            const ScrubOutcome& outcome) {
  ATRIUM_ASSIGN_OR_RETURN(auto decisions,
                          scheduler_->FinishScrub(hold.allocation, hold.node, hold.gpu, outcome.ok,
                                                  clock_.NowMillis(), outcome.detail));
  SchedulingCommit commit;
  if (!outcome.ok) {
    commit.node_flags.push_back(NodeFlagsOf(*scheduler_->fleet().FindNode(hold.node)));
  }
  AuditRecord a;
  a.time = clock_.NowMillis();
  a.actor = kSchedulerActor;
  a.action = outcome.ok ? "scheduler.scrubbed" : "scheduler.scrub_failed";
  a.target = "node/" + hold.node + "/gpu/" + std::to_string(hold.gpu);
  a.outcome = outcome.ok ? "allowed" : "failed";
  commit.audit.push_back(std::move(a));
  if (!outcome.ok) {
    spdlog::warn("GPU {} of {} is out of service: scrub failed: {}", hold.gpu, hold.node,
                 outcome.detail);
  }
  return CommitLocked(RequestOrigin{.actor = kSchedulerActor}, decisions, std::move(commit),
                      nullptr, "");
}

void SchedulingService::ScrubFinished(const ScrubJob& job, const ScrubOutcome& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return;
  auto it = stored_scrubs_.find(std::make_tuple(job.node, job.gpu, job.allocation));
  if (it == stored_scrubs_.end() || it->second.state != sched::ScrubState::kScrubbing) {
    spdlog::info("scrub of {} gpu {} for {} finished but is no longer held", job.node, job.gpu,
                 job.allocation);
    return;
  }
  const sched::ScrubHold hold = it->second;
  if (auto done = FinishScrubLocked(hold, outcome); !done) {
    spdlog::error("scrub of {}: {}", sched::DescribeScrub(hold), done.error().message);
  }
}

void SchedulingService::SetWorkloadProbe(WorkloadProbe probe) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    probe_set_ = static_cast<bool>(probe);
  }
  scrubber_.SetWorkloadProbe(std::move(probe));
}

std::vector<sched::ScrubHold> SchedulingService::Scrubs() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return {};
  return scheduler_->Scrubs();
}

Status SchedulingService::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::FailedPrecondition("the scheduler is not started");
  sched::DecisionRecords decisions = scheduler_->AdvanceTime(clock_.NowMillis());
  if (decisions.empty()) return OkStatus();
  return CommitLocked(RequestOrigin{.actor = kSchedulerActor}, decisions, {}, nullptr, "");
}

// ------------------------------------------------------------ allocations

Result<AllocationRecord> SchedulingService::Submit(const RequestOrigin& by,
                                                   const std::string& tenant_id,
                                                   const std::string& user_id,
                                                   sched::AllocationRequest request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyLocked(tenant_id));
  if (!request.project.empty() && !policy.projects.contains(request.project)) {
    return Error::InvalidArgument("project '" + request.project + "' does not exist");
  }
  if (request.kind == sched::AllocationKind::kNode && request.gpus == 0) {
    // A lease names the node's GPU count; by default the size of the
    // model's first node in the fleet.
    request.gpus = 1;
    for (const capacity::Node& n : scheduler_->fleet().nodes()) {
      if (n.gpu_model == request.model) {
        request.gpus = static_cast<int32_t>(n.gpus.size());
        break;
      }
    }
  }
  if (request.id.empty()) {
    request.id = NewId("alloc", clock_);
  } else {
    // A caller that records the id before submitting (the job service) may
    // submit again after a crash; an id in use, held or ended, is refused so
    // no row is ever overwritten.
    if (!IsWellFormedId(request.id, "alloc")) {
      return Error::InvalidArgument("allocation id '" + request.id + "' is malformed");
    }
    if (scheduler_->Find(request.id) != nullptr) {
      return Error::AlreadyExists("allocation " + request.id + " exists");
    }
    auto stored = store_.GetAllocationForPlatform(request.id);
    if (stored.has_value()) return Error::AlreadyExists("allocation " + request.id + " exists");
    if (stored.error().code != ErrorCode::kNotFound) return std::move(stored).error();
  }
  request.tenant = tenant_id;
  const std::string id = request.id;
  const sched::AllocationRequest submitted = request;
  ATRIUM_ASSIGN_OR_RETURN(sched::DecisionRecords decisions,
                          scheduler_->Submit(std::move(request), clock_.NowMillis()));
  std::optional<std::string> rejected;
  for (const auto& d : decisions) {
    if (d.allocation_id == id && d.kind == sched::DecisionKind::kRejected) rejected = d.reason;
  }
  ATRIUM_RETURN_IF_ERROR(CommitLocked(
      by, decisions, {}, [&](const sched::DecisionRecord& d) { return d.allocation_id == id; },
      tenant_id, id, user_id));
  if (rejected) return Error::FailedPrecondition("the request can never fit: " + *rejected);
  NoteRequestLocked(submitted);
  return store_.GetAllocation(TenantScope::Of(tenant_id), id);
}

Result<AllocationRecord> SchedulingService::Release(const RequestOrigin& by,
                                                    const std::string& tenant_id,
                                                    const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  const sched::Allocation* a = scheduler_->Find(id);
  if (a == nullptr || a->request.tenant != tenant_id) {
    ATRIUM_ASSIGN_OR_RETURN(AllocationRecord r,
                            store_.GetAllocation(TenantScope::Of(tenant_id), id));
    return Error::FailedPrecondition("allocation " + id + " is already " + r.state);
  }
  ATRIUM_ASSIGN_OR_RETURN(sched::DecisionRecords decisions,
                          scheduler_->Release(id, clock_.NowMillis()));
  ATRIUM_RETURN_IF_ERROR(CommitLocked(
      by, decisions, {}, [&](const sched::DecisionRecord& d) { return d.allocation_id == id; },
      tenant_id));
  return store_.GetAllocation(TenantScope::Of(tenant_id), id);
}

Result<std::string> SchedulingService::Explain(const std::string& tenant_id, const std::string& id,
                                               sched::Scheduler::Audience audience) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  const sched::Allocation* a = scheduler_->Find(id);
  if (a != nullptr && a->request.tenant == tenant_id) return scheduler_->Explain(id, audience);
  ATRIUM_ASSIGN_OR_RETURN(AllocationRecord r, store_.GetAllocation(TenantScope::Of(tenant_id), id));
  return r.state + " at " + std::to_string(r.ended_ms) + " ms: " + r.reason;
}

// ---------------------------------------------------------- quotas, projects

Result<sched::TenantPolicy> SchedulingService::PolicyLocked(const std::string& tenant_id) {
  auto it = requested_.find(tenant_id);
  if (it != requested_.end() && scheduler_->tenants().contains(tenant_id)) return it->second;
  // A tenant another process created: read it once and keep it.
  ATRIUM_ASSIGN_OR_RETURN(Tenant t, store_.GetTenant(tenant_id));
  ATRIUM_ASSIGN_OR_RETURN(auto quotas, store_.ListQuotas(TenantScope::Of(tenant_id)));
  ATRIUM_ASSIGN_OR_RETURN(auto projects, store_.ListProjects(TenantScope::Of(tenant_id)));
  ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyFromRecords(t, quotas, projects));
  ATRIUM_ASSIGN_OR_RETURN(auto decisions, SetTenantLocked(policy));
  ATRIUM_RETURN_IF_ERROR(
      CommitLocked(RequestOrigin{.actor = kSchedulerActor}, decisions, {}, nullptr, ""));
  return policy;
}

Result<sched::DecisionRecords> SchedulingService::SetTenantLocked(sched::TenantPolicy requested) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto decisions,
      scheduler_->SetTenant(sched::ClampProjectSplit(requested).policy, clock_.NowMillis()));
  requested_[requested.id] = std::move(requested);
  return decisions;
}

Result<SchedulingService::QuotaSet> SchedulingService::SetQuota(const RequestOrigin& by,
                                                                const std::string& tenant_id,
                                                                const std::string& project,
                                                                const QuotaChange& change) {
  QuotaSet out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!scheduler_) return Error::Unavailable("the scheduler is not started");
    ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyLocked(tenant_id));
    auto rc = sched::ResourceClass::Parse(change.model + "/" + change.kind);
    if (!rc.has_value()) return rc.error();
    if (change.guarantee_milli < 0 || change.limit_milli < change.guarantee_milli) {
      return Error::InvalidArgument("a quota needs 0 <= guarantee_milli <= limit_milli");
    }
    const sched::Quota next{change.guarantee_milli, change.limit_milli};
    if (project.empty()) {
      // The operator's quota: always applies; the projects' split follows
      // it (clamped), so only the tenant's own figures are checked.
      if (next == sched::Quota{}) {
        policy.quotas.erase(*rc);
      } else {
        policy.quotas[*rc] = next;
      }
    } else {
      // A tenant admin's split: a 0/0 row is kept (the class is denied to
      // the project); the change may not raise the project beyond what
      // the tenant has.
      ATRIUM_RETURN_IF_ERROR(sched::ValidateProjectChange(policy, project, *rc, next));
      policy.projects[project][*rc] = next;
    }
    const sched::EffectiveSplit split = sched::ClampProjectSplit(policy);
    ATRIUM_RETURN_IF_ERROR(sched::ValidateTenantPolicy(split.policy));
    for (const auto& [name, classes] : split.clamped) {
      if (std::find(classes.begin(), classes.end(), *rc) != classes.end()) {
        out.clamped_projects.push_back(name);
      }
    }
    ATRIUM_ASSIGN_OR_RETURN(auto decisions, SetTenantLocked(std::move(policy)));
    SchedulingCommit commit;
    commit.quotas.push_back({tenant_id, project, rc->model, std::string(sched::KindName(rc->kind)),
                             change.guarantee_milli, change.limit_milli, clock_.NowMillis()});
    ATRIUM_RETURN_IF_ERROR(CommitLocked(by, decisions, std::move(commit), nullptr, tenant_id));
  }
  ATRIUM_ASSIGN_OR_RETURN(out.rows, store_.ListQuotas(TenantScope::Of(tenant_id)));
  return out;
}

Status SchedulingService::ClearProjectQuota(const RequestOrigin& by, const std::string& tenant_id,
                                            const std::string& project, const std::string& model,
                                            const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyLocked(tenant_id));
  auto rc = sched::ResourceClass::Parse(model + "/" + kind);
  if (!rc.has_value()) return rc.error();
  auto p = policy.projects.find(project);
  if (p == policy.projects.end()) return Error::NotFound("project not found");
  if (p->second.erase(*rc) == 0) {
    return Error::NotFound("project " + project + " has no quota for " + rc->ToString());
  }
  ATRIUM_ASSIGN_OR_RETURN(auto decisions, SetTenantLocked(std::move(policy)));
  SchedulingCommit commit;
  commit.removed_quotas.push_back(
      {tenant_id, project, rc->model, std::string(sched::KindName(rc->kind)), 0, 0, 0});
  return CommitLocked(by, decisions, std::move(commit), nullptr, tenant_id);
}

Result<ProjectRecord> SchedulingService::CreateProject(const RequestOrigin& by,
                                                       const std::string& tenant_id,
                                                       const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyLocked(tenant_id));
  if (policy.projects.contains(name)) {
    return Error::AlreadyExists("a project named '" + name + "' exists");
  }
  policy.projects[name];
  ATRIUM_ASSIGN_OR_RETURN(auto decisions, SetTenantLocked(std::move(policy)));
  SchedulingCommit commit;
  ProjectRecord project{tenant_id, name, clock_.NowMillis()};
  commit.new_projects.push_back(project);
  ATRIUM_RETURN_IF_ERROR(CommitLocked(by, decisions, std::move(commit), nullptr, tenant_id));
  return project;
}

Status SchedulingService::DeleteProject(const RequestOrigin& by, const std::string& tenant_id,
                                        const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  ATRIUM_ASSIGN_OR_RETURN(sched::TenantPolicy policy, PolicyLocked(tenant_id));
  if (!policy.projects.contains(name)) return Error::NotFound("project not found");
  for (const sched::Allocation& a : scheduler_->Allocations()) {
    if (a.request.tenant == tenant_id && a.request.project == name) {
      return Error::FailedPrecondition("project '" + name + "' still holds allocation " + a.id() +
                                       "; release its allocations first");
    }
  }
  policy.projects.erase(name);
  ATRIUM_ASSIGN_OR_RETURN(auto decisions, SetTenantLocked(std::move(policy)));
  SchedulingCommit commit;
  commit.deleted_projects.emplace_back(tenant_id, name);
  return CommitLocked(by, decisions, std::move(commit), nullptr, tenant_id);
}

// ---------------------------------------------------------------- inventory

Status SchedulingService::NodeOp(const RequestOrigin& by, const std::string& node,
                                 const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  const int64_t now = clock_.NowMillis();
  const std::string op = what;
  ATRIUM_ASSIGN_OR_RETURN(auto asked, AskedToMoveLocked(node));
  Result<sched::DecisionRecords> decisions = op == "cordon"  ? scheduler_->Cordon(node, now)
                                             : op == "drain" ? scheduler_->Drain(node, now)
                                                             : scheduler_->Uncordon(node, now);
  if (!decisions.has_value()) return std::move(decisions).error();
  SchedulingCommit commit;
  commit.node_flags.push_back(NodeFlagsOf(*scheduler_->fleet().FindNode(node)));
  ClearedMovesLocked(asked, *decisions, commit);
  // Move requests are the operator's doing; placements the pass made are
  // the scheduler's.
  return CommitLocked(
      by, *decisions, std::move(commit),
      [](const sched::DecisionRecord& d) { return d.kind == sched::DecisionKind::kMoveRequested; },
      "");
}

Status SchedulingService::Cordon(const RequestOrigin& by, const std::string& node) {
  return NodeOp(by, node, "cordon");
}
Status SchedulingService::Drain(const RequestOrigin& by, const std::string& node) {
  return NodeOp(by, node, "drain");
}
Status SchedulingService::Uncordon(const RequestOrigin& by, const std::string& node) {
  return NodeOp(by, node, "uncordon");
}

Status SchedulingService::SetGpuHealth(const RequestOrigin& by, const std::string& node, int gpu,
                                       bool healthy, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  ATRIUM_ASSIGN_OR_RETURN(auto asked, AskedToMoveLocked(node));
  ATRIUM_ASSIGN_OR_RETURN(auto decisions,
                          scheduler_->SetGpuHealth(node, gpu, healthy, clock_.NowMillis(), reason));
  SchedulingCommit commit;
  commit.node_flags.push_back(NodeFlagsOf(*scheduler_->fleet().FindNode(node)));
  ClearedMovesLocked(asked, decisions, commit);
  // Move requests and the preemptions of work on the broken GPU are the
  // operator's doing; what the pass decided after is the scheduler's.
  return CommitLocked(
      by, decisions, std::move(commit),
      [&](const sched::DecisionRecord& d) {
        return d.kind == sched::DecisionKind::kMoveRequested ||
               (d.kind == sched::DecisionKind::kPreempted && !healthy &&
                d.reason.starts_with("GPU " + std::to_string(gpu) + " of " + node));
      },
      "");
}

Result<std::map<std::string, AllocationRecord>> SchedulingService::AskedToMoveLocked(
    const std::string& node) {
  std::map<std::string, AllocationRecord> out;
  for (const sched::Allocation& a : scheduler_->Allocations()) {
    if (a.move_requested.empty()) continue;
    for (const sched::NodePlacement& p : a.placement) {
      if (p.node != node) continue;
      ATRIUM_ASSIGN_OR_RETURN(out[a.id()],
                              store_.GetAllocation(TenantScope::Of(a.request.tenant), a.id()));
      break;
    }
  }
  return out;
}

void SchedulingService::ClearedMovesLocked(const std::map<std::string, AllocationRecord>& asked,
                                           const sched::DecisionRecords& decisions,
                                           SchedulingCommit& commit) {
  for (const auto& [id, stored] : asked) {
    const sched::Allocation* a = scheduler_->Find(id);
    if (a == nullptr || !a->move_requested.empty()) continue;
    const bool decided =
        std::any_of(decisions.begin(), decisions.end(),
                    [&](const sched::DecisionRecord& d) { return d.allocation_id == id; });
    if (decided) continue;  // CommitLocked writes its row
    AllocationRecord r = AllocationToRecord(*a, stored.created_by, clock_.NowMillis());
    r.reason = stored.reason;
    commit.allocations.push_back(std::move(r));
  }
}

SchedulingService::NodePage SchedulingService::Nodes(std::string_view viewer_tenant,
                                                     const NodeQuery& query) {
  std::lock_guard<std::mutex> lock(mu_);
  NodePage page;
  if (!scheduler_) return page;
  const sched::ClusterState& state = scheduler_->cluster();
  const auto count = static_cast<size_t>(state.node_count());
  for (size_t i = query.offset; i < count; ++i) {
    const capacity::Node& n = state.node(static_cast<int32_t>(i));
    if (!query.pool.empty() && n.pool != query.pool) continue;
    if (!query.model.empty() && n.gpu_model != query.model) continue;
    if (page.items.size() == query.limit) {
      page.next_offset = i;
      break;
    }
    page.items.push_back(DescribeNode(*scheduler_, static_cast<int32_t>(i), viewer_tenant));
  }
  return page;
}

Result<NodeInfo> SchedulingService::Node(std::string_view viewer_tenant, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return Error::Unavailable("the scheduler is not started");
  auto i = scheduler_->cluster().NodeIndex(name);
  if (!i) return Error::NotFound("node not found");
  return DescribeNode(*scheduler_, *i, viewer_tenant);
}

std::vector<CapacityRow> SchedulingService::Capacity() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return {};
  return DescribeCapacity(*scheduler_);
}

std::vector<int64_t> SchedulingService::UsedMilli(const std::vector<QuotaRecord>& rows) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> out;
  for (const QuotaRecord& q : rows) {
    int64_t used = 0;
    auto rc = sched::ResourceClass::Parse(q.model + "/" + q.kind);
    if (scheduler_ && rc.has_value()) {
      used = q.project.empty() ? scheduler_->ledger().Tenant(q.tenant_id, *rc).used
                               : scheduler_->ledger().Project(q.tenant_id, q.project, *rc).used;
    }
    out.push_back(used);
  }
  return out;
}

std::string SchedulingService::fleet_spec() {
  std::lock_guard<std::mutex> lock(mu_);
  return fleet_spec_;
}

// ------------------------------------------------------------ tenant hooks

void SchedulingService::TenantChanged(const Tenant& tenant) {
  std::lock_guard<std::mutex> lock(mu_);
  TenantChangedLocked(tenant);
}

Result<Tenant> SchedulingService::ApplyTenantChange(const Tenant& next,
                                                    const std::function<Result<Tenant>()>& write) {
  std::lock_guard<std::mutex> lock(mu_);
  if (scheduler_) {
    if (auto tier = sched::ParseTier(next.tier); tier.has_value()) {
      ATRIUM_RETURN_IF_ERROR(scheduler_->CheckTierChange(next.id, *tier));
    }
  }
  ATRIUM_ASSIGN_OR_RETURN(Tenant stored, write());
  TenantChangedLocked(stored);
  return stored;
}

void SchedulingService::TenantChangedLocked(const Tenant& tenant) {
  if (!scheduler_) return;
  sched::TenantPolicy policy;
  auto it = requested_.find(tenant.id);
  if (it != requested_.end()) policy = it->second;
  auto fresh = PolicyFromRecords(tenant, {}, {});
  if (!fresh.has_value()) {
    spdlog::error("scheduler: tenant {}: {}", tenant.id, fresh.error().message);
    return;
  }
  // Tier, weight, regions and state come from the tenant row; quotas and
  // projects stay as the scheduler holds them.
  fresh->quotas = std::move(policy.quotas);
  fresh->projects = std::move(policy.projects);
  fresh->pools = std::move(policy.pools);
  auto decisions = SetTenantLocked(std::move(*fresh));
  if (!decisions.has_value()) {
    spdlog::error("scheduler: tenant {}: {}", tenant.id, decisions.error().message);
    return;
  }
  if (auto s = CommitLocked(RequestOrigin{.actor = kSchedulerActor}, *decisions, {}, nullptr, "");
      !s) {
    spdlog::error("scheduler: tenant {}: {}", tenant.id, s.error().message);
  }
}

Status SchedulingService::TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!scheduler_) return OkStatus();
  if (!scheduler_->tenants().contains(tenant_id)) return OkStatus();  // nothing held
  ATRIUM_ASSIGN_OR_RETURN(auto decisions, scheduler_->Evict(tenant_id, clock_.NowMillis()));
  requested_.erase(tenant_id);
  return CommitLocked(
      by, decisions, {}, [&](const sched::DecisionRecord& d) { return d.tenant == tenant_id; },
      tenant_id);
}

}  // namespace atrium::scheduling
