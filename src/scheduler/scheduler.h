// The scheduler core: tenants, quotas, the pending queue, placement, reclaim
// and explanations over one fleet. Pure and deterministic: no I/O, no clock
// (every call takes the time, in milliseconds, and time never goes back: an
// earlier time is taken as the latest one seen), no threads. The shell feeds
// it events and persists what it returns.
//
// Every mutating call runs one scheduling pass at its time and returns the
// decision records it made, in order. A pass:
//  0. plans anew each reclaim with a victim due now that is no longer
//     borrowed (its tenant fell back within its guarantee): that victim is
//     let go, never preempted (step 6 does the same for the others);
//  1. preempts victims whose grace period has ended;
//  2. cancels reclaims whose reclaimer is gone or suspended;
//  3. rejects queued requests that can no longer ever fit: a quota lowered,
//     or (only after a tenant's policy changed or a restore) no node the
//     tenant may use takes them any more (admission's NodeScopeRefusal,
//     asked once per request shape); cordons, drains and health never
//     reject;
//  4. walks the queue: reclaimers first (oldest first), then requests within
//     their guarantee, then the rest by weighted dominant share (smallest
//     first, as of the start of the walk), then priority class, then
//     submission order. Each request is placed if its quota allows it now,
//     a placement exists, and placing it keeps every reclaim in flight
//     feasible; a request within its guarantee that does not fit starts a
//     reclaim (victims get `grace_ms`; with grace 0 they go at once), as
//     does one within its project's guarantee that the tenant's limit holds
//     back while sibling projects borrow the headroom (quota.h, sub-levels);
//  5. reconciles reclaims with the guarantees as the walk left them: a
//     reclaimer no longer within its guarantee lets its victims go, and
//     every request within its guarantee that waits without a reclaim (it
//     became entitled during the walk, or every borrower was marked for a
//     reclaim the walk then ended) starts one now. So a request within its
//     guarantee is placed within `grace_ms` of becoming entitled whenever
//     borrowed capacity can make room. When step 5 let go of room the walk
//     had kept free, steps 4 and 5 run once more;
//  6. plans anew every reclaim left with a victim no longer borrowed (the
//     victim is let go; the replacement gets a full grace period).
// Reclaim counts a reclaimer in flight as already placed: a tenant whose own
// request displaces its borrowed work stays as far above its guarantee.
// Suspended tenants' requests stay queued and are skipped; their running
// allocations keep running (the API decides whether to release them).
// Quota changes and suspensions apply from the next pass; neither preempts
// or moves running work by itself. A cordon, drain or GPU health change
// first re-plans every reclaim in flight (its room may be victims there, or
// idle GPUs there a gang counted on): a reclaimer that still fits with its
// victims gone lets go of the victims it no longer needs; one that does not,
// or whose victims also give back limit headroom, has its victims chosen
// anew (victims chosen again keep their grace end; if none fit, the reclaim
// is cancelled). So no GPU is freed where the reclaimer may not go.
// With SchedulerOptions::scrub_gpus, what an ended allocation held of each
// GPU stays held (ScrubHold) until FinishScrub; reclaim plans against the
// room those scrubs will free, so a request that fits once they finish
// waits for them and starts no reclaim.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "capacity/inventory.h"
#include "common/result.h"
#include "scheduler/allocation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/engine.h"
#include "scheduler/placement.h"
#include "scheduler/policies.h"
#include "scheduler/quota.h"
#include "scheduler/shape_memo.h"
#include "scheduler/tenant_policy.h"

namespace atrium::sched {

struct ReclaimInput;

struct SchedulerOptions {
  // How long a reclaim victim keeps running after it is marked. Default 30 s.
  int64_t grace_ms = 30'000;
  // The engine's placement policy (MakePolicy name). Default "atrium"; a
  // policy that draws random numbers makes decisions after Restore differ.
  std::string policy = "atrium";
  // Workload for fragmentation-aware policies; may be empty.
  PolicyContext policy_context;
  uint64_t seed = 1;
  // The most queued (pending) requests one tenant may hold, and one project
  // of a tenant; a submission beyond either is refused (ResourceExhausted)
  // and changes nothing, like Slurm's MaxSubmitJobs. Bounds what one
  // tenant's backlog costs every other tenant's scheduling. Defaults 1,000
  // and 500; both must be positive.
  int64_t max_pending_per_tenant = 1'000;
  int64_t max_pending_per_project = 500;
  // Scrub before reuse: what an ended allocation (released, preempted,
  // evicted) held of each GPU stays held (a ScrubHold) until FinishScrub
  // says that GPU was scrubbed, so no tenant is placed on a GPU the last one
  // may have left data on. Default false: simulators and benchmarks free
  // capacity at once; the server (src/scheduling) always turns it on.
  bool scrub_gpus = false;
};

using DecisionRecords = std::vector<DecisionRecord>;

class Scheduler {
 public:
  // InvalidArgument when the fleet fails capacity::ValidateFleet, the policy
  // is unknown, or grace_ms is negative.
  static Result<std::unique_ptr<Scheduler>> Create(capacity::Fleet fleet,
                                                   SchedulerOptions options = {});

  // --- tenants ---
  // Adds or replaces a tenant (quota, weight, tier, regions, pools, suspended
  // flag). InvalidArgument (ValidateTenantPolicy) and FailedPrecondition (a
  // tier change its running work would break, CheckTierChange) change
  // nothing.
  Result<DecisionRecords> SetTenant(TenantPolicy policy, int64_t now_ms);
  // OK when the tenant is unknown, keeps its tier, or has no work the new
  // tier would not allow where it runs (TierConflicts); otherwise
  // FailedPrecondition naming the first 10 such allocations and how many
  // more. The shell asks before it writes a tenant's new tier.
  Status CheckTierChange(std::string_view tenant, IsolationTier tier) const;
  // Suspended: queued requests are not placed and new ones are rejected.
  // NotFound for an unknown tenant.
  Result<DecisionRecords> Suspend(std::string_view tenant, int64_t now_ms);
  Result<DecisionRecords> Resume(std::string_view tenant, int64_t now_ms);
  // The tenant's placed allocations that `tier` would not allow where they
  // run, in submission order: for dedicated-gpu, those on a GPU that also
  // holds another tenant's work; for dedicated-node, those on a node that
  // does; for dedicated-pool, those in a pool not dedicated to the tenant.
  // Empty for shared (a lowering is always fine) and for an unknown tenant.
  // Changes nothing: the shell refuses a tier change that would leave any.
  std::vector<std::string> TierConflicts(std::string_view tenant, IsolationTier tier) const;
  // Releases every allocation of the tenant (running ones and queued ones)
  // and forgets the tenant. NotFound for an unknown tenant.
  Result<DecisionRecords> Evict(std::string_view tenant, int64_t now_ms);

  // --- allocations ---
  // Admits a request: a kRejected record when it can never fit, otherwise a
  // kQueued record followed by whatever the pass decided. Errors (nothing
  // changes): InvalidArgument for an empty or over-long id, AlreadyExists
  // for an id the scheduler holds, ResourceExhausted when the tenant or the
  // project already holds its most pending requests (the options' caps).
  Result<DecisionRecords> Submit(AllocationRequest request, int64_t now_ms);
  // Releases a running allocation or cancels a queued one. NotFound if the
  // scheduler does not hold `id`.
  Result<DecisionRecords> Release(std::string_view id, int64_t now_ms);
  // Runs a pass at now_ms (grace expiry).
  DecisionRecords AdvanceTime(int64_t now_ms);

  // --- scrub (SchedulerOptions::scrub_gpus) ---
  // The scrub of GPU `gpu` of `node` that allocation `allocation` left
  // finished. ok: its hold goes and the room is free (a pass runs). Not ok:
  // the GPU is marked unhealthy as SetGpuHealth(false) does, with the note
  // kScrubFailed (other tenants' allocations read it), and the hold stays,
  // marked kFailed with the reason "scrub failed: <detail>", until the GPU is marked healthy again
  // (an operator's word that it is clean), which drops it. NotFound when no hold of that allocation
  // waits for its scrub on that GPU (unknown, already finished, or failed).
  Result<DecisionRecords> FinishScrub(std::string_view allocation, std::string_view node, int gpu,
                                      bool ok, int64_t now_ms, std::string_view detail = {});
  // Every scrub hold, scrubbing and failed, by (node, GPU, allocation).
  std::vector<ScrubHold> Scrubs() const;
  // The holds allocation `id` left (empty when none).
  std::vector<ScrubHold> ScrubsOf(std::string_view id) const;

  // --- inventory ---
  // NotFound for an unknown node or GPU. Cordon: no new placements. Drain:
  // no new placements, and a kMoveRequested record per allocation on the
  // node. Uncordon clears both. An unhealthy GPU takes no new work (of any
  // kind); preemptible work on it is preempted at once (kPreempted with the
  // reason) and every other allocation on it gets a kMoveRequested record.
  // Each re-plans the reclaims in flight with a victim on the node (see the
  // file comment). Allocations asked to move carry the request
  // (Allocation::move_requested) until the node or GPU is back in service.
  Result<DecisionRecords> Cordon(std::string_view node, int64_t now_ms);
  Result<DecisionRecords> Drain(std::string_view node, int64_t now_ms);
  Result<DecisionRecords> Uncordon(std::string_view node, int64_t now_ms);
  // `note` (optional) is added to the reason the records give.
  Result<DecisionRecords> SetGpuHealth(std::string_view node, int gpu, bool healthy, int64_t now_ms,
                                       std::string_view note = {});
  // What a restart owes the inventory: the allocations on a draining node
  // or an unhealthy GPU that carry no move request get one (preemptible
  // work on an unhealthy GPU is preempted), as SetGpuHealth and Drain would
  // have done; then a pass. The shell calls it after Restore, so flags set
  // while the service was down (or by hand) take effect, and a request
  // already recorded is not made again.
  DecisionRecords RequestOutstandingMoves(int64_t now_ms);

  // Pending requests the tenant (project "": all of the tenant's) holds.
  int64_t PendingCount(std::string_view tenant, std::string_view project = {}) const;
  // How many times, since creation, the scheduler looked at one queued
  // request: a quota verdict taken or a step of the walk. What a pass costs
  // grows with this, so tests pin that a backlog of requests that cannot be
  // placed does not add to it pass after pass.
  uint64_t requests_examined() const { return requests_examined_; }

  // --- queries ---
  // Who an explanation is for. A tenant (kOwner) is never told which of
  // another tenant's allocations a reclaim takes, nor which allocation of
  // another tenant takes its own: it reads "reclaimed for another tenant's
  // guarantee" / "waits for reclaim of borrowed capacity". Platform staff
  // (kStaff) see the allocation ids and tenants.
  enum class Audience { kOwner, kStaff };
  // Why a queued request waits (or where a running one runs), in words:
  // the quota with used/guarantee/limit, the constraints that refuse nodes
  // (isolation tier, pool, region, power budget with watts needed and left),
  // and what it waits for (reclaim of borrowed capacity, grace end). NotFound
  // for an id the scheduler does not hold.
  Result<std::string> Explain(std::string_view id, Audience audience = Audience::kOwner) const;
  // Every held allocation, in submission order. The shell persists these.
  std::vector<Allocation> Allocations() const;
  // nullptr when not held. Valid until the next mutating call.
  const Allocation* Find(std::string_view id) const;
  // Queued ids in the order the next pass starts from.
  std::vector<std::string> Queue() const;
  const capacity::Fleet& fleet() const { return *fleet_; }

  // Sets the workload the placement policy aims at — FGD's "typical pods",
  // which Atrium's policy measures fragmentation and displaced work against —
  // from a sample of recent requests (whole-GPU, gang and share requests
  // count; MIG and node leases do not use the engine's scoring). Rebuilds the
  // policy and the engine's snapshot; placements and the queue are unchanged.
  // Without a workload Atrium's policy packs. The shell chooses the sample
  // (recent requests from the store), so it survives restarts.
  void SetWorkload(const std::vector<AllocationRequest>& recent);
  const std::vector<TypicalPod>& workload() const { return options_.policy_context.workload; }
  const TenantTable& tenants() const { return tenants_; }
  const QuotaLedger& ledger() const { return ledger_; }
  const ClusterState& cluster() const { return state_; }
  int64_t now_ms() const { return now_ms_; }

  // Rebuilds the allocations of a scheduler after a restart: call on a new
  // scheduler with the same fleet and tenants, before anything else. Running
  // and preempting allocations take exactly their recorded placements;
  // queued ones keep their order. Runs no pass (the next call does).
  // FailedPrecondition when the scheduler already holds allocations, or an
  // allocation does not fit its recorded place (nothing is kept then);
  // InvalidArgument for duplicates or unknown tenants or models, or a charge
  // other than ChargeMilli's (a MIG instance stored with the nearest-milli
  // charge of before is taken and charged as now; see MigMilli).
  // `scrubs`: the scrub holds to bring back (Scrubs() as persisted), so a
  // restart mid-scrub hands no GPU out before its scrub finished;
  // FailedPrecondition when one does not fit beside the allocations,
  // InvalidArgument for a duplicate or a kNode hold.
  Status Restore(const std::vector<Allocation>& allocations,
                 const std::vector<ScrubHold>& scrubs = {});

 private:
  Scheduler(std::unique_ptr<capacity::Fleet> fleet, SchedulerOptions options,
            std::unique_ptr<Policy> policy);

  // Queued requests within their guarantee counting the older queued
  // requests of their sub-level (see quota.h: their project, or the rest of
  // the tenant) that are: a project with three queued 1-GPU requests and
  // one GPU of guarantee left is entitled to one of them, the oldest,
  // whatever the tenant's guarantee. Only these start reclaims and go ahead
  // of borrowers.
  struct Ahead {
    // The charges of the tenant's older entitled requests of the same class
    // (they are placed first, so a reclaim counts them), less those with a
    // reclaim in flight (a reclaim counts every reclaimer in flight as
    // placed already), and the part of them in the request's sub-level.
    int64_t tenant = 0;
    int64_t sub_level = 0;
  };
  struct Entitlement {
    // Entitled request → what is ahead of it.
    std::map<std::string, Ahead, std::less<>> ahead;
    bool contains(std::string_view id) const { return ahead.find(id) != ahead.end(); }
  };
  // Oldest first.
  using IdList = std::vector<std::string>;

  // Pending requests by shape (see shape_memo.h), oldest first: the walk
  // takes each shape's requests as one ordered lane, and a pass's quota
  // verdicts and entitlement are taken per shape, so a backlog of one shape
  // costs a pass what one request costs while it cannot be placed. A queue
  // emptied is dropped at the end of the pass (the walk holds pointers to
  // them), and its no-fit mark with it (a search would fail again, and a
  // failed search changes nothing).
  struct ShapeQueue {
    std::map<uint64_t, Allocation*> requests;  // seq → pending request
    // The generation in which a placement search for the shape failed
    // (kNoGeneration: none did). A request of the shape is skipped without
    // a search while generation_ is still that one.
    uint64_t no_fit_generation = kNoGeneration;
  };
  static constexpr uint64_t kNoGeneration = UINT64_MAX;

  // `freed_for`: reclaimers whose victims went away before this pass (an
  // early release); they go first like those whose victims it preempts.
  void Pass(int64_t now_ms, DecisionRecords& out, IdList freed_for = {});
  // One walk of the queue (step 4 of a pass). `reserving`: the reclaimers
  // whose room the walk keeps free, updated as reclaims start and end.
  void Walk(const Entitlement& entitled, const std::set<std::string, std::less<>>& freed,
            IdList& reserving, std::map<std::string, uint64_t, std::less<>>& tried,
            DecisionRecords& out);
  // Step 5: cancels reclaims whose reclaimer is no longer entitled, and
  // starts one for every entitled queued request without one. Returns
  // whether a cancelled reclaim had been reserving room during the walk.
  bool ReconcileReclaims(IdList& reserving, std::map<std::string, uint64_t, std::less<>>& tried,
                         DecisionRecords& out);
  void Advance(int64_t now_ms) { now_ms_ = std::max(now_ms_, now_ms); }
  // `reserving`: reclaims whose room the placement must leave (nullptr: none).
  // `shape_settled` (optional) is set when it failed in a way every request
  // of `a`'s shape would until the generation moves: the shape found no
  // placement in this generation, or its quota verdict holds it back.
  // `shape`: a's entry in shapes_ when the caller has it (else looked up).
  bool TryPlace(Allocation& a, const IdList* reserving, DecisionRecords& out,
                bool* shape_settled = nullptr, ShapeQueue* shape = nullptr);
  // `ahead`: what is ahead of it (Entitlement). Returns whether it marked
  // victims (or, with grace 0, placed).
  bool StartReclaim(Allocation& a, const Ahead& ahead, DecisionRecords& out);
  // Starts a reclaim for the entitled queued request `a` (`ahead`: what is
  // ahead of it); while its victims' grace runs it joins `reserving`, in
  // submission order. A reclaim that marked nothing is remembered in `tried`
  // at this revision_, so step 5 does not try it again until a placement or
  // a mark changes. Shared by the walk (step 4) and step 5 of the pass.
  void ReclaimAndReserve(Allocation& a, const Ahead& ahead, IdList& reserving,
                         std::map<std::string, uint64_t, std::less<>>& tried, DecisionRecords& out);
  // What ChooseVictims needs for `a`'s reclaim (its request charged with
  // what is `ahead` of it): the candidates, the charges already marked and
  // in flight, and the limit deficits; `fits` is left for the caller. `excluding`: a
  // reclaimer whose own reclaim is left out (its victims not counted as
  // marked, itself not as in flight), to check that reclaim against all the
  // others.
  ReclaimInput ReclaimInputFor(const Allocation& a, const Ahead& ahead,
                               std::string_view excluding) const;
  // Entitled reclaimers (oldest first) with a victim no longer borrowed: the
  // victims' tenant's guarantee was raised or its other work released since
  // they were marked, and preempting them would take work within a
  // guarantee. `only_due`: only reclaims with a victim whose grace is over.
  IdList ReclaimersWithUnborrowedVictims(bool only_due) const;
  // Returns the reclaimers whose victims it preempted.
  IdList PreemptExpired(DecisionRecords& out);
  void CancelReclaim(std::string_view reclaimer, DecisionRecords& out);
  // What a victim's records say it was reclaimed for: the reclaiming
  // allocation's id when it is of the victim's own tenant, otherwise only
  // "another tenant's guarantee" (decision reasons are stored on the
  // victim's allocation and shown to its tenant).
  std::string ReclaimerForVictim(const Allocation& victim) const;
  // Removes a kPreempting allocation from reclaims_ (it is going away).
  void ForgetVictim(const Allocation& victim);
  bool ApplyPlaced(Allocation& a);
  // Gives back what a placed allocation that is ending held; with
  // scrub_gpus on, its GPU room stays held by its scrub holds.
  void RemovePlaced(Allocation& a);
  // The cluster as it will be once every scrub in flight is done: state_
  // when none is. Reclaim plans against it (a victim's room comes free after
  // its scrub, so scrubbing room is not a reason to take more victims).
  // Valid until the next change of the state.
  const ClusterState& SettledState() const;
  // Whether `a` would fit once the scrubs in flight finish, though it does
  // not fit now: it waits for them rather than starting a reclaim.
  bool WaitsForScrub(const Allocation& a) const;
  void RefreshEngine(const Allocation& a);
  void RefreshEngineNode(int32_t node);
  bool KeepsReservations(const Allocation& a, const Placement& p, const IdList& reserving) const;
  // Every reclaimer with victims, oldest first.
  IdList Reclaimers() const;
  // The reclaimers whose room the next walk keeps free: those still entitled.
  IdList ReservingReclaimers(const Entitlement& entitled) const;
  std::vector<const Allocation*> VictimsOf(std::string_view reclaimer) const;
  std::optional<PlacementContext> ContextFor(const Allocation& a, const ClusterState& state) const;
  QuotaCheck QuotaFor(const Allocation& a) const;
  QuotaVerdict QuotaVerdictFor(const Allocation& a) const;
  // The quota verdict of a shape's requests, for callers walking shapes_ in
  // order: taken once per run of neighbours the quota reads alike (`run`
  // remembers the last one).
  struct VerdictRun {
    const AllocationRequest* shape = nullptr;
    QuotaVerdict verdict = QuotaVerdict::kWaits;
  };
  QuotaVerdict ShapeVerdict(const AllocationRequest& shape, const Allocation& head,
                            VerdictRun& run) const;
  Entitlement ComputeEntitlement() const;
  double ShareOf(std::string_view tenant) const;
  // Reclaimers whose victims are gone (`freed`), then reserving reclaimers,
  // then entitled requests, then (`borrowers`) the rest (see the file
  // comment). Without the rest it costs what those few cost, not the queue.
  std::vector<Allocation*> OrderedQueue(const Entitlement& entitled, const IdList& reserving,
                                        const std::set<std::string, std::less<>>& freed,
                                        bool borrowers = true);

  Result<int32_t> NodeByName(std::string_view node) const;
  // Asks every allocation on the node (gpu >= 0: on that GPU) to move;
  // `only_unasked`: those without a move request yet.
  void RequestMoves(int32_t node, int gpu, std::string_view reason, DecisionRecords& out,
                    bool only_unasked = false);
  // Preempts the preemptible allocations on GPU `gpu` of the node (it went
  // unhealthy). Returns the reclaimers whose victims it took.
  IdList PreemptOnUnhealthyGpu(int32_t node, int gpu, const std::string& reason,
                               DecisionRecords& out);
  // Clears the move requests of allocations on the node that no longer run
  // on a draining node or an unhealthy GPU.
  void ClearSettledMoves(int32_t node);
  // Whether the reclaimer has a placement with `gone` removed from the cluster.
  bool FitsWithout(const Allocation& reclaimer, const std::vector<const Allocation*>& gone) const;
  // Re-plans the reclaims of `reclaimers` after an inventory change
  // (`change` names it in the records): see the file comment.
  // `rechoose`: choose the victims anew even where the room still holds
  // (some are no longer borrowed).
  void ReplanReclaims(const IdList& reclaimers, const std::string& change, DecisionRecords& out,
                      bool rechoose = false);
  DecisionRecord Record(DecisionKind kind, const Allocation& a, std::string reason = {}) const;
  // Keeps pending_ and shapes_ in step when `a` (held in allocations_)
  // enters (+1) or leaves (-1) the queue.
  void CountPending(Allocation& a, int delta);
  // Something changed that can alter a placement search's answer (see
  // shape_memo.h): earlier "does not fit" marks no longer hold.
  void CapacityChanged() { ++generation_; }

  std::unique_ptr<capacity::Fleet> fleet_;  // owned; ClusterState points into it
  SchedulerOptions options_;
  std::unique_ptr<Policy> policy_;
  ClusterState state_;
  std::unique_ptr<Engine> engine_;
  QuotaLedger ledger_;
  TenantTable tenants_;
  std::map<std::string, Allocation, std::less<>> allocations_;
  std::map<std::string, int64_t> model_capacity_;  // model → milli-GPU in the fleet
  // Reclaims in flight: reclaimer → its victims (the kPreempting
  // allocations whose preempted_for names it). Derived from allocations_.
  std::map<std::string, std::set<std::string>, std::less<>> reclaims_;
  // Bumped whenever a placement is taken or given back or a victim is let
  // go: a reclaim that failed at the same revision would fail again.
  uint64_t revision_ = 0;
  // Bumped on every change that can alter a placement search's answer: a
  // placement taken or given back, node flags or health, a tenant's policy,
  // the placement policy. Shapes that found no placement in this generation
  // are skipped without a search (ShapeQueue::no_fit_generation).
  uint64_t generation_ = 0;
  // Pending requests per tenant (key: tenant) and per project (key: tenant,
  // NUL, project), for the submission caps.
  std::map<std::string, int64_t, std::less<>> pending_;
  using Shapes = std::map<AllocationRequest, ShapeQueue, ShapeLess>;
  Shapes shapes_;
  std::vector<Shapes::iterator> emptied_shapes_;
  // Set when what NodeScopeRefusal reads may have changed (a tenant's
  // policy, a restore onto a fleet): the next pass re-checks every queued
  // shape once and clears it.
  bool scope_changed_ = false;
  // Scrub holds by (node, GPU, allocation).
  std::map<std::tuple<std::string, int, std::string>, ScrubHold> scrubs_;
  size_t scrubs_in_flight_ = 0;  // those in kScrubbing
  // SettledState's copy and the revision_ it was taken at.
  mutable std::optional<ClusterState> settled_;
  mutable uint64_t settled_revision_ = UINT64_MAX;
  uint64_t next_seq_ = 1;
  int64_t now_ms_ = 0;
  mutable uint64_t requests_examined_ = 0;
};

}  // namespace atrium::sched
