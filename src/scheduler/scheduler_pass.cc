// One scheduling pass (see the file comment of scheduler.h) and the reclaim
// planning it and the inventory events share.
#include <algorithm>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "scheduler/admission.h"
#include "scheduler/reclaim.h"
#include "scheduler/scheduler.h"
#include "scheduler/scheduler_internal.h"

namespace atrium::sched {
namespace {

// Why a victim's mark is let go when its reclaim is planned anew because
// one of its victims is no longer borrowed.
constexpr char kNoLongerBorrowed[] = "a victim's tenant is no longer above its guarantee";

}  // namespace

// ------------------------------------------------------------------ pass

bool Scheduler::KeepsReservations(const Allocation& a, const Placement& p,
                                  const IdList& reserving) const {
  if (reserving.empty()) return true;
  auto all_fit = [&](ClusterState s) {
    for (const std::string& id : reserving) {
      for (const Allocation* v : VictimsOf(id)) s.Remove(*v);
    }
    for (const std::string& id : reserving) {
      auto r = allocations_.find(id);
      if (id == a.id() || r == allocations_.end() || r->second.Placed()) continue;
      auto ctx = ContextFor(r->second, s);
      if (!ctx) continue;
      auto placement = FindPlacement(*ctx, nullptr);
      if (!placement) return false;
      Allocation tmp = r->second;
      tmp.placement = placement->nodes;
      tmp.mig_start = placement->mig_start;
      if (!s.Apply(tmp)) return false;
    }
    return true;
  };
  // Reclaims that no longer fit anyway (the cluster changed) block nobody;
  // they start over when their victims are gone.
  if (!all_fit(SettledState())) return true;
  ClusterState with = SettledState();
  Allocation tmp = a;
  tmp.placement = p.nodes;
  tmp.mig_start = p.mig_start;
  if (!with.Apply(tmp)) return false;
  return all_fit(std::move(with));
}

bool Scheduler::TryPlace(Allocation& a, const IdList* reserving, DecisionRecords& out,
                         bool* shape_settled, ShapeQueue* shape) {
  // A request of a shape that found no room in this generation of the
  // cluster would find none now either: skipped without a search (and
  // before the quota check, which cannot make it fit), so a backlog of one
  // unplaceable shape costs one search, not one per request.
  auto settled = [&] {
    if (shape_settled != nullptr) *shape_settled = true;
    return false;
  };
  if (shape == nullptr) {
    auto it = shapes_.find(a.request);
    if (it != shapes_.end()) shape = &it->second;
  }
  if (shape != nullptr && shape->no_fit_generation == generation_) return settled();
  // A request within its guarantee that the tenant's limit holds back
  // (kWithinGuaranteeOverLimit) is entitled but placed only once its
  // reclaim has given the headroom back.
  const QuotaVerdict q = QuotaVerdictFor(a);
  if (q != QuotaVerdict::kWithinGuarantee && q != QuotaVerdict::kBorrows) return settled();
  auto ctx = ContextFor(a, state_);
  if (!ctx) return false;
  auto p = FindPlacement(*ctx, engine_.get());
  if (!p) {
    if (shape != nullptr) shape->no_fit_generation = generation_;
    return settled();
  }
  if (reserving != nullptr && !KeepsReservations(a, *p, *reserving)) return false;
  a.placement = p->nodes;
  a.mig_start = p->mig_start;
  a.state = AllocationState::kRunning;
  a.placed_ms = now_ms_;
  if (!ApplyPlaced(a)) {
    a.placement.clear();
    a.mig_start = -1;
    a.state = AllocationState::kPending;
    a.placed_ms = -1;
    return false;
  }
  CountPending(a, -1);
  out.push_back(Record(DecisionKind::kPlaced, a));
  return true;
}

Scheduler::IdList Scheduler::PreemptExpired(DecisionRecords& out) {
  std::vector<Allocation*> due;
  for (auto& [reclaimer, victims] : reclaims_) {
    for (const std::string& id : victims) {
      Allocation& a = allocations_.find(id)->second;
      if (a.preempt_at_ms <= now_ms_) due.push_back(&a);
    }
  }
  std::sort(due.begin(), due.end(), [](const Allocation* x, const Allocation* y) {
    return std::tie(x->preempt_at_ms, x->seq) < std::tie(y->preempt_at_ms, y->seq);
  });
  IdList reclaimers;
  for (Allocation* a : due) {
    RemovePlaced(*a);
    out.push_back(Record(DecisionKind::kPreempted, *a,
                         "grace period over; capacity reclaimed for " + ReclaimerForVictim(*a)));
    if (std::find(reclaimers.begin(), reclaimers.end(), a->preempted_for) == reclaimers.end()) {
      reclaimers.push_back(a->preempted_for);
    }
    ForgetVictim(*a);
    allocations_.erase(a->id());
  }
  return reclaimers;
}

void Scheduler::CancelReclaim(std::string_view reclaimer, DecisionRecords& out) {
  auto r = reclaims_.find(reclaimer);
  if (r == reclaims_.end()) return;
  const std::vector<const Allocation*> victims = VictimsOf(reclaimer);
  reclaims_.erase(r);
  ++revision_;
  for (const Allocation* v : victims) {
    Allocation& a = allocations_.find(v->id())->second;
    a.state = AllocationState::kRunning;
    a.preempt_at_ms = -1;
    const std::string why = "the reclaim for " + ReclaimerForVictim(a) + " no longer needs it";
    a.preempted_for.clear();
    out.push_back(Record(DecisionKind::kPreemptionCancelled, a, why));
  }
}

ReclaimInput Scheduler::ReclaimInputFor(const Allocation& a, const Ahead& ahead,
                                        std::string_view excluding) const {
  // The tenant's older entitled requests will be placed first, so they count
  // toward what makes its own preemptible work borrowed.
  ReclaimInput in{SettledState(),
                  tenants_,
                  ledger_,
                  {},
                  {},
                  a.request,
                  ClassOf(a.request),
                  a.charge_milli + ahead.tenant,
                  nullptr};
  in.request_sub_level_charge = a.charge_milli + ahead.sub_level;
  auto counted = [&](const std::string& reclaimer) { return reclaimer != excluding; };
  const ResourceClass rc = ClassOf(a.request);
  const TenantPolicy& t = tenants_.find(a.request.tenant)->second;
  // Marked and in-flight charges per tenant class, and per sub-level for
  // tenants that split the class.
  auto count_marked = [&](const Allocation& v, int64_t charge) {
    const ResourceClass vc = ClassOf(v.request);
    in.already_marked[{v.request.tenant, vc}] += charge;
    auto vt = tenants_.find(v.request.tenant);
    if (vt != tenants_.end() && SplitsClass(vt->second, vc)) {
      in.already_marked_sub_levels[{v.request.tenant, vc,
                                    std::string(SubLevelOf(vt->second, v.request.project, vc))}] +=
          charge;
    }
  };
  int64_t project_marked = 0;
  for (const auto& [id, v] : allocations_) {
    if (v.state == AllocationState::kRunning) in.running.push_back(&v);
    if (v.state != AllocationState::kPreempting || !counted(v.preempted_for)) continue;
    count_marked(v, v.charge_milli);
    if (v.request.tenant == a.request.tenant && v.request.project == a.request.project &&
        ClassOf(v.request) == rc) {
      project_marked += v.charge_milli;
    }
  }
  // A reclaimer in flight is placed when its victims go, so its tenant's use
  // comes back by its charge: a tenant whose interactive request displaces
  // its own borrowed work stays as far above its guarantee as before, and
  // the rest of that excess is still borrowed for others to reclaim.
  for (const auto& [id, victims] : reclaims_) {
    auto r = allocations_.find(id);
    if (!counted(id) || r == allocations_.end() || r->second.Placed()) continue;
    count_marked(r->second, -r->second.charge_milli);
    // Likewise for the project's limit (Ahead::sub_level leaves them out).
    if (r->second.request.tenant == a.request.tenant &&
        r->second.request.project == a.request.project && ClassOf(r->second.request) == rc) {
      project_marked -= r->second.charge_milli;
    }
  }
  // A request within its sub-level's guarantee that a limit holds back
  // (kWithinGuaranteeOverLimit: siblings borrow the headroom, or, for
  // interactive or batch work, its own preemptible work holds it) has its
  // reclaim give the headroom back too.
  if (const Quota* q = t.QuotaFor(rc)) {
    in.limit_deficit = ledger_.Tenant(a.request.tenant, rc).used -
                       in.already_marked[{a.request.tenant, rc}] + in.request_charge - q->limit;
  }
  if (const Quota* pq = t.ProjectQuotaFor(a.request.project, rc)) {
    in.project_limit_deficit = ledger_.Project(a.request.tenant, a.request.project, rc).used -
                               project_marked + in.request_sub_level_charge - pq->limit;
  }
  return in;
}

bool Scheduler::StartReclaim(Allocation& a, const Ahead& ahead, DecisionRecords& out) {
  auto t = tenants_.find(a.request.tenant);
  const capacity::GpuModel* model = capacity::FindGpuModel(a.request.model);
  if (t == tenants_.end() || model == nullptr) return false;
  ReclaimInput in = ReclaimInputFor(a, ahead, /*excluding=*/{});
  in.fits = [&](const ClusterState& s) {
    PlacementContext ctx{s, tenants_, t->second, a.request, *model};
    return FindPlacement(ctx, nullptr).has_value();
  };
  const std::vector<const Allocation*> victims = ChooseVictims(in);
  if (victims.empty()) return false;
  for (const Allocation* v : victims) {
    Allocation& victim = allocations_.find(v->id())->second;
    victim.state = AllocationState::kPreempting;
    victim.preempt_at_ms = now_ms_ + options_.grace_ms;
    victim.preempted_for = a.id();
    reclaims_[a.id()].insert(victim.id());
    DecisionRecord r = Record(DecisionKind::kPreemptionScheduled, victim,
                              "borrowed capacity reclaimed for " + ReclaimerForVictim(victim));
    r.preempt_at_ms = victim.preempt_at_ms;
    out.push_back(std::move(r));
  }
  if (options_.grace_ms == 0) {
    (void)PreemptExpired(out);
    if (TryPlace(a, /*reserving=*/nullptr, out)) CancelReclaim(a.id(), out);
  }
  return true;
}

void Scheduler::ReclaimAndReserve(Allocation& a, const Ahead& ahead, IdList& reserving,
                                  std::map<std::string, uint64_t, std::less<>>& tried,
                                  DecisionRecords& out) {
  const std::string& id = a.id();
  // Room a scrub is freeing is on its way: a reclaim would take victims the
  // request does not need (their room, too, would come only after a scrub).
  if (WaitsForScrub(a) || !StartReclaim(a, ahead, out)) {
    tried[id] = revision_;
    return;
  }
  // (With grace 0 the reclaim may have placed it already.)
  if (a.state != AllocationState::kPending || !reclaims_.contains(id)) return;
  auto by_seq = [&](const std::string& x, const std::string& y) {
    return allocations_.find(x)->second.seq < allocations_.find(y)->second.seq;
  };
  reserving.insert(std::upper_bound(reserving.begin(), reserving.end(), id, by_seq), id);
}

void Scheduler::Walk(const Entitlement& entitled, const std::set<std::string, std::less<>>& freed,
                     IdList& reserving, std::map<std::string, uint64_t, std::less<>>& tried,
                     DecisionRecords& out) {
  // Returns whether the step did nothing, as every later request of the
  // shape would do nothing until the generation moves.
  auto visit = [&](Allocation& a, ShapeQueue* shape) {
    ++requests_examined_;
    if (a.state != AllocationState::kPending) return false;
    auto t = tenants_.find(a.request.tenant);
    if (t == tenants_.end() || t->second.suspended) return false;
    const std::string& id = a.id();
    auto r = std::find(reserving.begin(), reserving.end(), id);
    // A reclaimer takes the room cleared for it whatever other reclaims wait.
    const bool reclaiming = freed.contains(id) || r != reserving.end();
    bool settled = false;
    if (TryPlace(a, reclaiming ? nullptr : &reserving, out, &settled, shape)) {
      if (r != reserving.end()) reserving.erase(r);
      CancelReclaim(id, out);
      return false;
    }
    if (reclaims_.contains(id) || !entitled.contains(id)) return settled;
    ReclaimAndReserve(a, entitled.ahead.find(id)->second, reserving, tried, out);
    return false;
  };

  // The order is fixed at the start of the walk (OrderedQueue's). The
  // borrowers (neither reclaimers nor entitled) come last, ordered by their
  // tenant's share, then priority, then age: all of one shape share the
  // first two, so each shape is a lane, oldest first, and the walk merges
  // the lanes. A lane whose request fails as the whole shape would
  // (ShapeSettled) sleeps: its next requests would do nothing until the
  // generation moves, and when it moves every sleeping lane wakes at its
  // first request after the one just walked. A backlog that cannot be
  // placed costs one step per shape and capacity change.
  // (Copies: `reserving` changes during the walk.)
  std::set<std::string, std::less<>> ahead(freed.begin(), freed.end());
  ahead.insert(reserving.begin(), reserving.end());
  for (const auto& [id, before] : entitled.ahead) ahead.insert(id);
  struct Lane {
    double share;
    int priority;
    ShapeQueue* queue;
  };
  std::vector<Lane> lanes;
  std::map<std::string_view, double, std::less<>> shares;  // as of the start of the walk
  for (auto& [shape, queue] : shapes_) {
    if (queue.requests.empty()) continue;
    auto t = tenants_.find(shape.tenant);
    if (t == tenants_.end() || t->second.suspended) continue;  // skipped by visit
    auto s = shares.find(shape.tenant);
    if (s == shares.end()) s = shares.emplace(shape.tenant, ShareOf(shape.tenant)).first;
    lanes.push_back({s->second, int(shape.priority), &queue});
  }
  // The lane's first borrower at or after `from`.
  auto next_in = [&](const Lane& lane, uint64_t from) -> std::optional<uint64_t> {
    const auto& requests = lane.queue->requests;
    for (auto it = requests.lower_bound(from); it != requests.end(); ++it) {
      if (!ahead.contains(it->second->id())) return it->first;
    }
    return std::nullopt;
  };
  using Step = std::tuple<double, int, uint64_t, size_t>;  // share, priority, seq, lane
  std::vector<Step> steps;
  for (size_t i = 0; i < lanes.size(); ++i) {
    if (auto n = next_in(lanes[i], 0)) steps.emplace_back(lanes[i].share, lanes[i].priority, *n, i);
  }
  std::priority_queue awake(std::greater<Step>{}, std::move(steps));  // the smallest on top
  std::vector<std::pair<size_t, uint64_t>> asleep;  // lane, its next request's seq

  for (Allocation* a : OrderedQueue(entitled, reserving, freed, /*borrowers=*/false)) {
    visit(*a, nullptr);
  }

  while (!awake.empty()) {
    const auto [share, priority, seq, i] = awake.top();
    awake.pop();
    const Lane& lane = lanes[i];
    const uint64_t generation = generation_;
    if (auto it = lane.queue->requests.find(seq); it != lane.queue->requests.end()) {
      Allocation& a = *it->second;
      const bool settled = visit(a, lane.queue) && generation_ == generation;
      const std::optional<uint64_t> next = next_in(lane, seq + 1);
      if (next && settled) {
        asleep.emplace_back(i, *next);
      } else if (next) {
        awake.emplace(share, priority, *next, i);
      }
    } else if (auto next = next_in(lane, seq + 1)) {
      awake.emplace(share, priority, *next, i);
    }
    if (generation_ == generation) continue;
    for (const auto& [j, from] : asleep) {
      const Lane& other = lanes[j];
      const auto order = std::tie(other.share, other.priority) <=> std::tie(share, priority);
      std::optional<uint64_t> next;
      if (order > 0) next = next_in(other, from);
      if (order == 0) next = next_in(other, std::max(from, seq + 1));
      if (next) awake.emplace(other.share, other.priority, *next, j);
    }
    asleep.clear();
  }
}

bool Scheduler::ReconcileReclaims(IdList& reserving,
                                  std::map<std::string, uint64_t, std::less<>>& tried,
                                  DecisionRecords& out) {
  const Entitlement entitled = ComputeEntitlement();
  bool released_reservation = false;
  for (const std::string& id : Reclaimers()) {
    if (entitled.contains(id)) continue;
    auto r = std::find(reserving.begin(), reserving.end(), id);
    if (r != reserving.end()) {
      released_reservation = true;
      reserving.erase(r);
    }
    CancelReclaim(id, out);
  }
  std::vector<Allocation*> waiting;
  for (const auto& [id, ahead] : entitled.ahead) {
    Allocation& a = allocations_.find(id)->second;
    if (reclaims_.contains(id)) continue;
    auto t = tenants_.find(a.request.tenant);
    if (t == tenants_.end() || t->second.suspended) continue;
    if (auto k = tried.find(id); k != tried.end() && k->second == revision_) continue;
    waiting.push_back(&a);
  }
  std::sort(waiting.begin(), waiting.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  for (Allocation* a : waiting) {
    if (a->state != AllocationState::kPending) continue;
    if (TryPlace(*a, &reserving, out)) continue;
    ReclaimAndReserve(*a, entitled.ahead.find(a->id())->second, reserving, tried, out);
  }
  return released_reservation;
}

void Scheduler::Pass(int64_t now_ms, DecisionRecords& out, IdList freed_for) {
  Advance(now_ms);
  // A victim no longer borrowed (its tenant's guarantee raised, or its
  // tenant's other work gone) is never preempted: a reclaim with such a
  // victim due now is planned anew before grace ends are acted on; the
  // others at the end of the pass, once the walk has placed what it could
  // (a release often gives the reclaimer its room outright).
  ReplanReclaims(ReclaimersWithUnborrowedVictims(/*only_due=*/true), kNoLongerBorrowed, out,
                 /*rechoose=*/true);
  // Reclaimers whose victims are gone now go first, ahead of everyone.
  for (std::string& id : PreemptExpired(out)) {
    if (std::find(freed_for.begin(), freed_for.end(), id) == freed_for.end()) {
      freed_for.push_back(std::move(id));
    }
  }

  // Reclaims whose reclaimer is gone or suspended. (One no longer entitled
  // keeps its victims marked through the walk, without reserving room: the
  // walk may make it entitled again, and cancelling and restarting would
  // restart the grace period. Step 5 decides.)
  for (const std::string& id : Reclaimers()) {
    auto r = allocations_.find(id);
    bool keep = r != allocations_.end() && !r->second.Placed();
    if (keep) {
      auto t = tenants_.find(r->second.request.tenant);
      keep = t != tenants_.end() && !t->second.suspended;
    }
    if (!keep) CancelReclaim(id, out);
  }

  // Queued requests a quota change made impossible.
  // The verdict is the same for every request of a shape; records go out in
  // id order.
  std::vector<Allocation*> rejected;
  VerdictRun run;
  for (const auto& [shape, queue] : shapes_) {
    if (queue.requests.empty() ||
        ShapeVerdict(shape, *queue.requests.begin()->second, run) != QuotaVerdict::kNeverFits) {
      continue;
    }
    for (const auto& [seq, a] : queue.requests) rejected.push_back(a);
  }
  // Queued requests a tenant's policy change (regions, pools, tier) or a
  // new fleet left without any node the tenant may use: the same check and
  // words as admission's, once per shape, and only when something it reads
  // changed (cordons, drains and health are not among them).
  std::map<std::string, std::string, std::less<>> out_of_scope;  // id → reason
  if (scope_changed_) {
    scope_changed_ = false;
    for (const auto& [shape, queue] : shapes_) {
      if (queue.requests.empty()) continue;
      const Allocation& head = *queue.requests.begin()->second;
      if (std::find(rejected.begin(), rejected.end(), &head) != rejected.end()) continue;
      auto t = tenants_.find(shape.tenant);
      const capacity::GpuModel* model = capacity::FindGpuModel(shape.model);
      if (t == tenants_.end() || model == nullptr) continue;
      std::string why = NodeScopeRefusal(shape, t->second, *model, state_, tenants_);
      if (why.empty()) continue;
      for (const auto& [seq, a] : queue.requests) {
        out_of_scope.emplace(a->id(), why);
        rejected.push_back(a);
      }
    }
  }
  std::sort(rejected.begin(), rejected.end(),
            [](const Allocation* x, const Allocation* y) { return x->id() < y->id(); });
  for (Allocation* a : rejected) {
    auto scope = out_of_scope.find(a->id());
    out.push_back(Record(DecisionKind::kRejected, *a,
                         scope != out_of_scope.end() ? scope->second : QuotaFor(*a).reason));
    CancelReclaim(a->id(), out);
    CountPending(*a, -1);
    allocations_.erase(a->id());
  }

  // Entitlement changes as the walk places work (a tenant's older requests
  // placed, or a reclaim the walk ends that had marked every borrower), so
  // step 5 reconciles reclaims with it once more: every request within its
  // guarantee at the end of the pass has its reclaim running, and its grace
  // period started at this decision, not the next. When step 5 let go of
  // room the walk had kept free, the queue is walked once more.
  std::set<std::string, std::less<>> freed(freed_for.begin(), freed_for.end());
  std::map<std::string, uint64_t, std::less<>> tried;  // failed reclaims → revision_
  for (int round = 0; round < 2; ++round) {
    const Entitlement entitled = ComputeEntitlement();
    IdList reserving = ReservingReclaimers(entitled);
    Walk(entitled, freed, reserving, tried, out);
    if (!ReconcileReclaims(reserving, tried, out)) break;
    freed.clear();
  }
  ReplanReclaims(ReclaimersWithUnborrowedVictims(/*only_due=*/false), kNoLongerBorrowed, out,
                 /*rechoose=*/true);
  // (A queue emptied stays empty through a pass: nothing is queued in one.)
  for (Shapes::iterator it : emptied_shapes_) {
    if (it->second.requests.empty()) shapes_.erase(it);
  }
  emptied_shapes_.clear();
}

bool Scheduler::FitsWithout(const Allocation& reclaimer,
                            const std::vector<const Allocation*>& gone) const {
  ClusterState trial = SettledState();
  for (const Allocation* v : gone) trial.Remove(*v);
  auto ctx = ContextFor(reclaimer, trial);
  return ctx && FindPlacement(*ctx, nullptr).has_value();
}

Scheduler::IdList Scheduler::ReclaimersWithUnborrowedVictims(bool only_due) const {
  IdList out;
  if (reclaims_.empty()) return out;
  IdList candidates = Reclaimers();
  if (only_due) {
    std::erase_if(candidates, [&](const std::string& id) {
      const auto victims = VictimsOf(id);
      return std::none_of(victims.begin(), victims.end(),
                          [&](const Allocation* v) { return v->preempt_at_ms <= now_ms_; });
    });
    if (candidates.empty()) return out;
  }
  const Entitlement entitled = ComputeEntitlement();
  for (const std::string& id : candidates) {
    auto r = allocations_.find(id);
    auto ahead = entitled.ahead.find(id);
    // A reclaimer gone or no longer entitled is the pass's to let go.
    if (r == allocations_.end() || r->second.Placed() || ahead == entitled.ahead.end()) continue;
    const Allocation& a = r->second;
    if (!StillBorrowed(ReclaimInputFor(a, ahead->second, /*excluding=*/id), VictimsOf(id))) {
      out.push_back(id);
    }
  }
  return out;
}

void Scheduler::ReplanReclaims(const IdList& reclaimers, const std::string& change,
                               DecisionRecords& out, bool rechoose) {
  if (reclaimers.empty()) return;
  const Entitlement entitled = ComputeEntitlement();
  auto unmark = [&](Allocation& v) {
    ForgetVictim(v);
    v.state = AllocationState::kRunning;
    v.preempt_at_ms = -1;
    v.preempted_for.clear();
    ++revision_;
  };
  for (const std::string& id : reclaimers) {
    auto r = allocations_.find(id);
    if (r == allocations_.end() || r->second.Placed() || !reclaims_.contains(id)) continue;
    Allocation& reclaimer = r->second;
    std::vector<const Allocation*> victims = VictimsOf(id);
    const std::string for_whom = ReclaimerForVictim(*victims.front());
    const std::string no_longer_needed =
        change + ": the reclaim for " + for_whom + " no longer needs it";
    // Victims marked for limit headroom (kWithinGuaranteeOverLimit) are
    // needed whether or not the room holds: such a reclaim is chosen anew.
    const bool for_headroom = QuotaVerdictFor(reclaimer) == QuotaVerdict::kWithinGuaranteeOverLimit;
    if (!rechoose && !for_headroom && FitsWithout(reclaimer, victims)) {
      // The room still holds: let go of the victims it does not need (a GPU
      // freed on a cordoned node helps nobody). The last one stays; if the
      // reclaimer fits without any, the pass places it and ends the reclaim.
      for (size_t k = 0; victims.size() > 1 && k < victims.size();) {
        std::vector<const Allocation*> rest = victims;
        rest.erase(rest.begin() + std::ptrdiff_t(k));
        if (FitsWithout(reclaimer, rest)) {
          Allocation& v = allocations_.find(victims[k]->id())->second;
          unmark(v);
          out.push_back(Record(DecisionKind::kPreemptionCancelled, v, no_longer_needed));
          victims = std::move(rest);
        } else {
          ++k;
        }
      }
      continue;
    }
    // The room is gone: the victims are chosen anew, as a new reclaim would
    // choose them. (One not entitled any more keeps its victims for step 5
    // of the pass to let go.)
    auto ahead = entitled.ahead.find(id);
    if (ahead == entitled.ahead.end()) continue;
    std::map<std::string, int64_t, std::less<>> before;  // victim → its grace end
    for (const Allocation* v : victims) {
      Allocation& a = allocations_.find(v->id())->second;
      before.emplace(a.id(), a.preempt_at_ms);
      unmark(a);
    }
    DecisionRecords chosen;
    (void)StartReclaim(reclaimer, ahead->second, chosen);
    DecisionRecords scheduled;
    for (DecisionRecord& d : chosen) {
      auto k = before.find(d.allocation_id);
      if (d.kind == DecisionKind::kPreemptionScheduled && k != before.end()) {
        // Chosen again: its grace period goes on, and nothing changed for it.
        allocations_.find(d.allocation_id)->second.preempt_at_ms = k->second;
        before.erase(k);
        continue;
      }
      scheduled.push_back(std::move(d));
    }
    const std::string why = reclaims_.contains(id) ? no_longer_needed
                                                   : change + ": the reclaim for " + for_whom +
                                                         " can no longer make room";
    for (const Allocation* v : victims) {
      if (before.contains(v->id())) {
        out.push_back(Record(DecisionKind::kPreemptionCancelled, *v, why));
      }
    }
    for (DecisionRecord& d : scheduled) out.push_back(std::move(d));
  }
}

}  // namespace atrium::sched
