// The shell around the pure scheduler: it owns one sched::Scheduler under a
// mutex, feeds it every event at the injected Clock's time, and persists
// what each call decided — allocation rows, quota and project rows, node
// flags and one audit record per decision that changes an allocation — in
// one store transaction per call.
//
// Start-up loads the fleet, the tenants (tier, weight, regions, state),
// quotas, projects and held allocations from the store and calls
// Scheduler::Restore, so a restart comes back with the same placements.
// A timer thread runs AdvanceTime every `tick_ms`, so queued requests are
// placed and grace periods end without a client call.
//
// Fleet at start (SchedulingOptions::fleet_spec):
//  - no fleet stored: the spec's fleet (or kDefaultDevFleetSpec when the
//    spec is empty) is built and stored;
//  - a fleet stored and the spec empty or equal to the stored one's: the
//    stored fleet, with its cordon/drain/health flags;
//  - a fleet stored from another spec: the new fleet replaces it (flags
//    start clear) if every held allocation keeps its recorded place on it;
//    otherwise Start fails naming the allocation that does not fit, and
//    nothing changes.
// A fleet given as rows (SchedulingOptions::fleet: this host's GPUs found
// through NVML) is used instead of any spec, under the same replacement
// rule; when the stored fleet has its spec, the stored operator flags carry
// over (WithStoredOperatorFlags).
//
// If a commit fails after the scheduler already decided, the service
// rebuilds the scheduler from the store (the last committed state), so
// memory never runs ahead of what a restart would restore.
//
// Thread-safe. Errors: InvalidArgument for bad input, NotFound for unknown
// tenants, nodes, projects and allocations (another tenant's allocation is
// not found), FailedPrecondition for a request that can never fit (the
// scheduler's reason) or an object in the wrong state, Unavailable when
// the store is down.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "scheduler/scheduler.h"
#include "scheduling/inventory_report.h"
#include "scheduling/scrub_runner.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"
#include "threads/periodic_thread.h"

namespace atrium::scheduling {

struct SchedulingOptions {
  // The fleet to run on; see the header comment. Default "": the stored
  // fleet, or capacity::kDefaultDevFleetSpec on an empty store.
  std::string fleet_spec;
  // Set: the fleet to run on, as rows (a discovered host,
  // nvml::FleetRecordForNode), in place of fleet_spec; its `spec` names it.
  std::optional<FleetRecord> fleet;
  // Grace period of reclaim victims. Default 30 s.
  int64_t grace_ms = 30'000;
  // Placement policy (sched::MakePolicy name). Default "atrium".
  std::string policy = "atrium";
  // How often the timer runs a scheduling pass. 0: no timer thread (tests
  // call Tick). Default 1 s.
  int64_t tick_ms = 1000;
  // The most pending allocation requests per tenant and per project; a
  // submission beyond either is refused (ResourceExhausted, 429). Defaults
  // 1,000 and 500 (sched::SchedulerOptions).
  int64_t max_pending_per_tenant = 1'000;
  int64_t max_pending_per_project = 500;
  // How GPUs are scrubbed before reuse (scrub_runner.h). Every ended
  // allocation's GPUs pass through "scrubbing"; with no command for their
  // model and no workload probe the scrub finishes in the same call.
  ScrubOptions scrub;
};

// Whether no process of an allocation remains (true: gone). The job service
// provides it; none set: workloads are taken as gone. Called on the scrub
// runner's threads (several at once), never under the service's lock, every
// ScrubOptions::workload_poll_ms until it says gone.
using WorkloadProbe = std::function<bool(const std::string& allocation_id)>;

// Told the ids of the allocations whose rows a commit just changed
// (placed, preempting, preempted, released, ...), so the job service acts
// on a placement at once instead of at its next reconcile. Called under the
// service's lock, after the commit: it must only note the ids and return
// (never call back into the service).
using AllocationsChanged = std::function<void(const std::vector<std::string>& allocation_ids)>;

// The audit actor of decisions nobody asked for directly: placements of
// queued requests, preemptions after grace.
inline constexpr char kSchedulerActor[] = "system:scheduler";

// One quota row to set. Guarantee = limit = 0 denies the class: for the
// tenant the row is removed (an absent class is 0/0), for a project a 0/0
// row is stored (an absent row would limit the project by the tenant's
// quota only; ClearProjectQuota goes back to that).
struct QuotaChange {
  std::string model;
  std::string kind;
  int64_t guarantee_milli = 0;
  int64_t limit_milli = 0;
};

class SchedulingService final : public TenantObserver {
 public:
  SchedulingService(Store& store, const Clock& clock, SchedulingOptions options = {});
  ~SchedulingService() override;
  SchedulingService(const SchedulingService&) = delete;
  SchedulingService& operator=(const SchedulingService&) = delete;

  // Loads (or builds) the fleet and everything else, restores allocations
  // and starts the timer. Errors: InvalidArgument for a bad fleet spec,
  // FailedPrecondition when stored allocations do not fit the fleet, the
  // store's errors.
  Status Start();
  // Stops the timer thread; call before closing the store. Idempotent.
  void Stop();
  // Runs one scheduling pass at the clock's time (what the timer does).
  Status Tick();

  // --- allocations ---
  // Admits `request` for `tenant_id`, requested by user `user_id`. The
  // service chooses the id unless `request.id` is set: a caller that must
  // find its allocation again after a crash (the job service) records a
  // NewId("alloc") first and submits with it; AlreadyExists when an
  // allocation with that id exists (held or ended), InvalidArgument for a
  // malformed one. A node lease with gpus 0 leases a node of the
  // size of the model's first node. Returns the stored record (pending or
  // running).
  // InvalidArgument for a bad request or an unknown project;
  // FailedPrecondition naming the reason when it can never fit (nothing is
  // stored then).
  Result<AllocationRecord> Submit(const RequestOrigin& by, const std::string& tenant_id,
                                  const std::string& user_id, sched::AllocationRequest request);
  // Releases a running allocation or cancels a pending one. NotFound when
  // the tenant has no such allocation; FailedPrecondition when it has ended.
  Result<AllocationRecord> Release(const RequestOrigin& by, const std::string& tenant_id,
                                   const std::string& id);
  // Why it waits, or where it runs, in words. The tenant's own audience
  // (the default) is never told which of another tenant's allocations a
  // reclaim involves; platform staff (kStaff) are.
  Result<std::string> Explain(
      const std::string& tenant_id, const std::string& id,
      sched::Scheduler::Audience audience = sched::Scheduler::Audience::kOwner);

  // --- quotas and projects ---
  // Sets one class of the tenant's quota (project "") or of a project's
  // split. The operator's tenant quota always applies: a project split it
  // no longer covers is kept as the tenant admin set it and enforced
  // clamped (sched::ClampProjectSplit; the admin's split applies again when
  // the quota is raised). A project change is InvalidArgument, naming the
  // project, when it raises the project beyond what the tenant has
  // (sched::ValidateProjectChange). InvalidArgument for a bad class or
  // figures; NotFound for an unknown tenant or project. Returns the
  // tenant's rows and the projects the changed class now clamps.
  struct QuotaSet {
    std::vector<QuotaRecord> rows;
    std::vector<std::string> clamped_projects;
  };
  Result<QuotaSet> SetQuota(const RequestOrigin& by, const std::string& tenant_id,
                            const std::string& project, const QuotaChange& change);
  // Removes a project's row for one class, so the project is limited by the
  // tenant's quota only. NotFound for an unknown tenant or project, or a
  // project without that row.
  Status ClearProjectQuota(const RequestOrigin& by, const std::string& tenant_id,
                           const std::string& project, const std::string& model,
                           const std::string& kind);
  Result<ProjectRecord> CreateProject(const RequestOrigin& by, const std::string& tenant_id,
                                      const std::string& name);
  // FailedPrecondition while allocations of the project are held.
  Status DeleteProject(const RequestOrigin& by, const std::string& tenant_id,
                       const std::string& name);

  // --- inventory ---
  Status Cordon(const RequestOrigin& by, const std::string& node);
  Status Drain(const RequestOrigin& by, const std::string& node);
  Status Uncordon(const RequestOrigin& by, const std::string& node);
  // Marks GPU `gpu` of `node` healthy or not; `reason` (optional, the
  // operator's words) goes into the decisions' reasons. Unhealthy: its
  // preemptible work is preempted and the rest asked to move (see
  // sched::Scheduler::SetGpuHealth). NotFound for an unknown node or GPU.
  Status SetGpuHealth(const RequestOrigin& by, const std::string& node, int gpu, bool healthy,
                      const std::string& reason = "");
  // Nodes in fleet order from position `offset` that match the filters
  // ("" = any), at most `limit`; viewer_tenant "" = the platform.
  struct NodeQuery {
    std::string pool;
    std::string model;
    size_t offset = 0;
    size_t limit = 100;
  };
  struct NodePage {
    std::vector<NodeInfo> items;
    std::optional<size_t> next_offset;  // where the next page starts, if any
  };
  NodePage Nodes(std::string_view viewer_tenant, const NodeQuery& query);
  Result<NodeInfo> Node(std::string_view viewer_tenant, const std::string& name);
  std::vector<CapacityRow> Capacity();
  // Milli-GPU in use now for each row's class, by the row's tenant (project
  // "") or project; in the rows' order.
  std::vector<int64_t> UsedMilli(const std::vector<QuotaRecord>& rows);
  // The spec the running fleet was built from ("" if not from a spec).
  std::string fleet_spec();
  // The request classes the placement policy currently aims at (built from
  // the newest stored requests at start and every 64 accepted requests).
  std::vector<sched::TypicalPod> TargetWorkload();

  // --- scrub ---
  // Scrubs wait until the probe says the allocation's workloads are gone.
  void SetWorkloadProbe(WorkloadProbe probe);
  // Unset (the default): nobody is told.
  void SetAllocationsChanged(AllocationsChanged listener);
  // Every scrub hold (scrubbing, or failed until the GPU is marked healthy).
  std::vector<sched::ScrubHold> Scrubs();

  // --- TenantObserver ---
  void TenantChanged(const Tenant& tenant) override;
  // Refuses (FailedPrecondition, naming up to 10 allocations and how many
  // more) a tier the tenant's placed work would break where it runs
  // (Scheduler::TierConflicts); otherwise writes and applies the row. The
  // scheduler's lock is held from the check to the apply, so no placement
  // (a queued share landing beside another tenant's) comes between.
  Result<Tenant> ApplyTenantChange(const Tenant& next,
                                   const std::function<Result<Tenant>()>& write) override;
  Status TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) override;

 private:
  // What one call decided, persisted together.
  struct Outcome {
    sched::DecisionRecords decisions;
    SchedulingCommit commit;
  };
  using Subject = std::function<bool(const sched::DecisionRecord&)>;

  Status LoadLocked();  // REQUIRES(mu_)
  // Adds an accepted request to the recent sample; every kWorkloadRefresh
  // requests hands the sample to the scheduler.
  void NoteRequestLocked(const sched::AllocationRequest& request);  // REQUIRES(mu_)
  // Persists `decisions` plus `commit` in one transaction. Decisions for
  // which `caused_by_caller` holds are audited as `by`; the rest as the
  // scheduler. `by`'s request id and source are recorded only on the
  // caller's own decisions and on decisions of `caller_tenant` (the tenant
  // the call acts for; "" for platform operations), never in another
  // tenant's chain. `new_allocation`: the submitted request's creator.
  Status CommitLocked(const RequestOrigin& by, const sched::DecisionRecords& decisions,
                      SchedulingCommit commit, const Subject& caused_by_caller,
                      const std::string& caller_tenant, const std::string& new_allocation_id = "",
                      const std::string& new_allocation_creator = "");  // REQUIRES(mu_)
  // The tenant's policy with its projects' split as the tenant admin set it
  // (requested_), read from the store when not held yet.
  Result<sched::TenantPolicy> PolicyLocked(const std::string& tenant_id);  // REQUIRES(mu_)
  // Hands the scheduler `requested` with the split clamped to the tenant's
  // quota, and keeps `requested` when the scheduler takes it.
  Result<sched::DecisionRecords> SetTenantLocked(sched::TenantPolicy requested);  // REQUIRES(mu_)
  void TenantChangedLocked(const Tenant& tenant);                                 // REQUIRES(mu_)
  Status NodeOp(const RequestOrigin& by, const std::string& node, const char* what);
  // The stored rows of the held allocations on `node` that carry a move
  // request (read before the scheduler changes, so nothing can fail after).
  Result<std::map<std::string, AllocationRecord>> AskedToMoveLocked(
      const std::string& node);  // REQUIRES(mu_)
  // Adds to `commit` the rows of the allocations in `asked` whose move
  // request the scheduler cleared (the node or GPU is back in service)
  // without a decision about them, so the store forgets it too.
  void ClearedMovesLocked(const std::map<std::string, AllocationRecord>& asked,
                          const sched::DecisionRecords& decisions,
                          SchedulingCommit& commit);  // REQUIRES(mu_)
  // A scrub the runner finished (on its worker thread): the room is freed,
  // or the GPU marked unhealthy; persisted and audited.
  void ScrubFinished(const ScrubJob& job, const ScrubOutcome& outcome);
  // Finishes the scrub of `hold` as `outcome` says and commits it.
  Status FinishScrubLocked(const sched::ScrubHold& hold,
                           const ScrubOutcome& outcome);  // REQUIRES(mu_)
  // Adds to `commit` the scrub holds that differ from stored_scrubs_.
  void ScrubChangesLocked(SchedulingCommit& commit);  // REQUIRES(mu_)
  // Hands the runner every scrubbing hold it may not have yet, or finishes
  // it at once when there is nothing to run or wait for.
  void StartScrubsLocked();  // REQUIRES(mu_)

  Store& store_;
  const Clock& clock_;
  SchedulingOptions options_;

  std::mutex mu_;
  std::unique_ptr<sched::Scheduler> scheduler_;  // GUARDED_BY(mu_)
  std::string fleet_spec_;                       // GUARDED_BY(mu_)
  // Creator (user id) of every held allocation: the scheduler does not keep it.
  std::map<std::string, std::string> creators_;  // GUARDED_BY(mu_)
  // Every tenant's policy with the projects' split as stored (the tenant
  // admin's rows); the scheduler holds the effective, clamped one.
  std::map<std::string, sched::TenantPolicy> requested_;  // GUARDED_BY(mu_)
  bool started_ = false;                                  // GUARDED_BY(mu_)
  // The newest requests (oldest first), the placement policy's target
  // workload; refreshed into the scheduler every kWorkloadRefresh requests.
  std::deque<sched::AllocationRequest> recent_;  // GUARDED_BY(mu_)
  int submitted_since_refresh_ = 0;              // GUARDED_BY(mu_)

  // The scrub holds as the store has them.
  std::map<std::tuple<std::string, int, std::string>, sched::ScrubHold>
      stored_scrubs_;           // GUARDED_BY(mu_)
  bool probe_set_ = false;      // GUARDED_BY(mu_)
  AllocationsChanged changed_;  // GUARDED_BY(mu_)
  ScrubRunner scrubber_;

  PeriodicThread timer_;  // "sched-timer": Tick every options_.tick_ms
};

}  // namespace atrium::scheduling
