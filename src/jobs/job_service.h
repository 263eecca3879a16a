// The job service: the shell that runs tenants' jobs on what the scheduler
// allocates, through an execution backend (src/exec/backend.h).
//
// Submit stores the job (pending) with the id of its allocation chosen up
// front, then submits that allocation with that id. A crash between the two
// loses nothing: the reconcile finds a pending job whose allocation does not
// exist and submits it again with the same id (the scheduling service
// refuses a second allocation with one id, so nothing is submitted twice).
//
// Tick (a thread calls it every tick_ms; tests call it with a ManualClock)
// reconciles every live job with its allocation and its workload. Between
// ticks a second thread reconciles single jobs as soon as it hears of them
// (hints, only with the thread): an allocation the scheduler just placed,
// preempted or released (SchedulingService::SetAllocationsChanged), a
// workload the backend heard end (ExecutionBackend::WatchEnds; looked at
// again after 50, 100, 200 ... ms while the backend still says it runs, as
// Slurm does while a job completes). So a GPU goes from one job to the
// next without waiting for a tick; the tick still covers whatever no hint
// told. What a reconcile does:
//  - allocation placed → backend Start (idempotent by workload id
//    "<job id>.<attempt>") → starting / running. Start comes before the
//    row says starting, so a crash between them starts nothing twice: the
//    next Start of that id returns the workload it already started;
//  - workload ended → the allocation is released (only now: the backend
//    says every process is gone), then succeeded / failed / cancelled /
//    preempted / timed-out as the end and the stop that caused it say;
//    once that is stored, the backend releases the workload (its uid and
//    directory go back; its log stays readable) — retried every Tick
//    until it succeeds;
//  - allocation preempting → Stop with grace = preempt_at − now; preempted
//    or released under a live job → Stop at once;
//  - time limit passed → Stop with time_limit_grace_ms;
//  - workload lost or unknown to the backend → lost.
// An attempt that ends failed, preempted or lost is requeued when the
// restart policy says so: a new allocation, attempt + 1, same job id.
// Every transition is one job event and one audit record, written with the
// row in one transaction (actor: the user who asked, or system:jobs).
//
// Start() first reconciles with backend.List(): workloads of jobs the
// store no longer has (their tenant was deleted) are stopped and
// forgotten, stale attempts stopped; running ones are adopted and ended
// ones recorded with their real end by the Tick that follows.
//
// Thread-safe. Every change of a job is made under that job's claim: one
// Submit, Cancel, Tick or StopTenantJobs changes a job at a time, and each
// reads the row again once it holds the claim, so a cancel and a tick
// never both act on what they read before the other's change. Backend and
// scheduler calls run under the job's claim only: a slow backend (the
// Slurm CLIs take seconds) holds up that job, never the requests about
// others. So the backend gets calls about different workloads at once
// (LocalBackend serialises them; SlurmBackend runs them side by side).
// Tick passes over a job another operation holds (the next tick sees it);
// Ticks run one at a time. The service's own sets are guarded by
// one mutex never held across a call out. WorkloadsGone, ReadLog and
// Explain take no claim, so the scheduler may call WorkloadsGone under its
// own lock.
//
// A stop's SIGKILL is sent by the backend when it is next asked about the
// workload after the grace (SlurmBackend; the local backend's supervisor
// keeps its own timer). Every stop with a grace belongs to a live job —
// the job stays live, with its stop recorded, until the backend reports
// the workload ended — and every Tick inspects every live job's workload
// (jobs.tick_ms, 1 s by default), so the SIGKILL leaves at most one tick
// late; after a restart, Start's Tick sends the ones whose grace ran out
// while it was down (the backend keeps the deadline). Stops without a
// grace (eviction, orphans, stale attempts) kill at once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "exec/backend.h"
#include "jobs/job_spec.h"
#include "jobs/job_state.h"
#include "jobs/launch.h"
#include "model/job_records.h"
#include "scheduling/scheduling_service.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"
#include "threads/periodic_thread.h"

namespace atrium::jobs {

// The audit actor of transitions nobody asked for directly.
inline constexpr char kJobsActor[] = "system:jobs";

// Resolves a job's environment template ("name" or "name@version") for
// its tenant: NotFound when there is none the tenant may use. Provided by
// the environment templates (wired by the runtime).
using EnvironmentResolver = std::function<Result<ResolvedEnvironment>(const std::string& tenant_id,
                                                                      const std::string& ref)>;
// Turns an uploaded archive's reference into a path on this machine,
// checking it is the tenant's and at most `declared_bytes` long.
using ArchiveResolver = std::function<Result<std::string>(
    const std::string& tenant_id, const std::string& archive, int64_t declared_bytes)>;

struct JobServiceOptions {
  JobLimits limits;
  // How often the reconcile thread runs Tick. 0: no thread (tests). Default 1 s.
  int64_t tick_ms = 1000;
  // SIGTERM → SIGKILL grace of a cancel and of a time limit. Default 30 s.
  int64_t cancel_grace_ms = 30'000;
  int64_t time_limit_grace_ms = 30'000;
  // The most log bytes one read returns, and the longest a follow waits.
  int64_t max_log_read_bytes = int64_t{1} << 20;
  int64_t max_log_wait_ms = 30'000;
  // Log follows that may wait at once, in all and per tenant. A follow
  // waits on one of the API server's threads, so the runtime keeps these
  // below its thread count; a follow over either bound answers at once
  // (the client asks again), so followers can never hold every thread.
  int max_log_waiters = 2;
  int max_log_waiters_per_tenant = 1;
  // Unset: a job naming an environment (or an archive) is refused
  // (FailedPrecondition) — the server has no templates (uploads).
  EnvironmentResolver resolve_environment;
  ArchiveResolver resolve_archive;
  // How long a start the backend refuses for want of something that may
  // still come (FailedPrecondition: a tenant not synced yet, a mechanism
  // the host lacks; ResourceExhausted: no workload uid free) is retried,
  // from the allocation's placement, before the job fails with the
  // backend's words and its allocation (held and billed meanwhile) is
  // freed. Default 60 s.
  int64_t start_retry_ms = 60'000;
  // Tenant tiers whose workloads must run fully confined: the backend
  // refuses to start them (the job fails, saying what the host lacks)
  // rather than run them with a mechanism missing. Empty: none.
  std::set<std::string> full_confinement_tiers;
};

class JobService {
 public:
  JobService(Store& store, scheduling::SchedulingService& scheduling,
             exec::ExecutionBackend& backend, const Clock& clock, JobServiceOptions options = {});
  ~JobService();
  JobService(const JobService&) = delete;
  JobService& operator=(const JobService&) = delete;

  // Reconciles with the backend (see the header comment), runs one Tick
  // and starts the thread. Errors: the backend's List error.
  Status Start();
  // Stops the thread; call before the scheduling service stops. Idempotent.
  void Stop();
  // One reconcile of every live job at the clock's time. Returns the first
  // error met; the other jobs are reconciled regardless.
  Status Tick();

  struct Submitted {
    JobRecord job;
    bool created = false;  // false: the idempotency key found an earlier job
  };
  // Submits `spec` for `tenant_id` as user `user_id`. With an idempotency
  // key, a second submission of the same spec returns the first job
  // (created false); of another spec, AlreadyExists (409). InvalidArgument
  // for a bad spec or unknown project; FailedPrecondition when it names an
  // environment or archive and the server has no resolver, or the
  // allocation can never fit (the job is then kept as failed, with the
  // reason); the resolvers' and the scheduler's errors.
  Result<Submitted> Submit(const RequestOrigin& by, const std::string& tenant_id,
                           const std::string& user_id, const JobSpec& spec,
                           const std::string& idempotency_key = "");
  // Cancels a live job: a pending one at once (its allocation released), a
  // started one by Stop with cancel_grace_ms; it becomes cancelled when the
  // backend reports the workload gone. Cancelling a job already stopping
  // changes nothing. NotFound for another tenant's job; FailedPrecondition
  // when it has ended.
  Result<JobRecord> Cancel(const RequestOrigin& by, const std::string& tenant_id,
                           const std::string& job_id);
  // A piece of the job's log for `attempt` (0 = the current one), at most
  // min(max_bytes, max_log_read_bytes) from `offset`. wait_ms > 0 (bounded
  // by max_log_wait_ms) waits for data while the workload lives, when a
  // waiter's place is free (max_log_waiters); otherwise it answers at once. NotFound
  // for another tenant's job; InvalidArgument for a bad attempt or range.
  Result<exec::LogChunk> ReadLog(const std::string& tenant_id, const std::string& job_id,
                                 int64_t attempt, int64_t offset, int64_t max_bytes,
                                 int64_t wait_ms = 0);
  // Log follows waiting now (tests and metrics).
  int log_waiters();
  // Pending: why its allocation waits (the scheduler's words); otherwise
  // where it runs or how it ended.
  Result<std::string> Explain(
      const std::string& tenant_id, const std::string& job_id,
      sched::Scheduler::Audience audience = sched::Scheduler::Audience::kOwner);
  // True when no workload of `allocation_id` is alive in the backend (none
  // was started, or it exited, was lost or forgotten). The GPU scrub's
  // probe: a GPU goes back to the pool only after this holds.
  bool WorkloadsGone(const std::string& allocation_id);
  // Eviction: stops every workload of the tenant at once (grace 0), ends
  // its live jobs as cancelled and forgets every workload (logs included)
  // once the backend reports it gone. Call before the tenant's rows are
  // deleted (JobsTenantObserver does).
  Status StopTenantJobs(const std::string& tenant_id, const RequestOrigin& by);

 private:
  struct Change;
  class Claim;
  // The *Claimed methods change `job`: the caller holds its claim.
  // `seen`: the workload's status from the tick's one InspectMany, used
  // when it is about the job's current workload; otherwise (or null) the
  // backend is asked.
  Status ReconcileClaimed(JobRecord job, const exec::WorkloadStatus* seen = nullptr);
  Status ReconcilePendingClaimed(JobRecord job);
  Status LaunchClaimed(JobRecord job, const AllocationRecord& allocation);
  Status FinishAttemptClaimed(const JobRecord& job, const exec::WorkloadStatus& status,
                              const Result<AllocationRecord>& allocation);
  // Ends the attempt by `cause` without a workload (it never started).
  Status EndWithoutWorkloadClaimed(JobRecord job, Cause cause, const std::string& detail);
  // Requeues when the policy says so; then submits the new allocation.
  Status CommitEndClaimed(Change& change, Cause cause);
  Status SubmitAllocationClaimed(const JobRecord& job);
  Status ReleaseAllocationClaimed(const JobRecord& job, const RequestOrigin& by);
  Status RequestStopClaimed(JobRecord job, const std::string& cause, int64_t grace_ms,
                            const std::string& actor);
  // Forgets the workloads in to_forget_ that are gone, stops the others.
  void ForgetGone();
  // Releases the ended workloads in to_release_ the backend can release now.
  void ReleaseEnded();
  bool StopSent(const std::string& workload_id);
  void SetStopSent(const std::string& workload_id, bool sent);
  Result<JobSpec> SpecOf(const JobRecord& job) const;
  // Reconciles hinted jobs as they come, on a thread of its own: a Tick
  // over thousands of jobs never holds one up.
  void HintLoop();
  // A hint: reconcile `job_id` (or the job of `allocation_id`) before the
  // next tick. `end`: the backend heard its workload end.
  void HintJob(const std::string& job_id, bool end);
  void HintAllocations(const std::vector<std::string>& allocation_ids);
  struct Hint {
    std::chrono::steady_clock::time_point due;
    int looks = 0;  // reconciles since the hint
    bool end = false;
  };
  // Reconciles one hinted job now; when its workload was heard ending but
  // still runs, looks again later (see the header comment).
  void ReconcileHinted(const std::string& job_id, Hint hint);

  Store& store_;
  scheduling::SchedulingService& scheduling_;
  exec::ExecutionBackend& backend_;
  const Clock& clock_;
  JobServiceOptions options_;

  std::mutex mu_;  // never held across a call out of the service
  std::condition_variable claim_cv_;
  // The jobs an operation is changing now (Claim).
  std::set<std::string> claimed_;  // GUARDED_BY(mu_)
  // Claims released by operations other than Tick: a Tick that sees it
  // moved since it listed the jobs reads a job's row again.
  uint64_t other_changes_ = 0;  // GUARDED_BY(mu_)
  // Workloads to forget once gone (evicted tenants', orphans).
  std::set<std::string> to_forget_;  // GUARDED_BY(mu_)
  std::string forget_cursor_;        // GUARDED_BY(mu_): where the last ForgetGone stopped
  // Ended workloads whose end is stored, to release once the backend can.
  std::set<std::string> to_release_;  // GUARDED_BY(mu_)
  // Allocations whose workload the backend said exited, released here:
  // WorkloadsGone answers them without asking the backend again (once).
  std::set<std::string> ended_allocations_;  // GUARDED_BY(mu_)
  // Stops sent by this process: a restarted one sends a persisted stop
  // again with the grace that is left.
  std::set<std::string> stops_sent_;  // GUARDED_BY(mu_)
  std::mutex tick_mu_;                // one Tick at a time
  std::mutex forget_mu_;              // one ForgetGone at a time

  // Allocation → workload of evicted tenants' jobs, whose rows are gone,
  // for WorkloadsGone.
  std::mutex evicted_mu_;
  std::map<std::string, std::string> evicted_workloads_;  // GUARDED_BY(evicted_mu_)

  // Log followers wait here; every Tick wakes them.
  std::mutex log_mu_;
  std::condition_variable log_cv_;
  int log_waiters_ = 0;                        // GUARDED_BY(log_mu_)
  std::map<std::string, int> tenant_waiters_;  // GUARDED_BY(log_mu_)
  // Takes a waiter's place for `tenant_id`; false when none is free.
  bool EnterLogWait(const std::string& tenant_id);
  void LeaveLogWait(const std::string& tenant_id);

  std::mutex timer_mu_;
  bool stopping_ = false;                     // GUARDED_BY(timer_mu_): the hint loop ends
  bool hinted_now_ = false;                   // GUARDED_BY(timer_mu_): a hint came
  std::map<std::string, Hint> hinted_jobs_;   // GUARDED_BY(timer_mu_)
  std::set<std::string> hinted_allocations_;  // GUARDED_BY(timer_mu_)
  std::condition_variable hint_cv_;           // with timer_mu_: a hint came, or stopping
  std::thread hints_;
  PeriodicThread reconcile_;  // Tick every options_.tick_ms
};

// The tenant observer the tenant service is given when jobs run: the job
// service stops a tenant's jobs before `next` (the scheduling service)
// releases its allocations; everything else is `next`'s.
class JobsTenantObserver final : public TenantObserver {
 public:
  JobsTenantObserver(JobService& jobs, TenantObserver& next) : jobs_(jobs), next_(next) {}
  void TenantChanged(const Tenant& tenant) override { next_.TenantChanged(tenant); }
  Result<Tenant> ApplyTenantChange(const Tenant& next,
                                   const std::function<Result<Tenant>()>& write) override {
    return next_.ApplyTenantChange(next, write);
  }
  Status TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) override;

 private:
  JobService& jobs_;
  TenantObserver& next_;
};

}  // namespace atrium::jobs
