#include "scheduler/scheduler.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <queue>
#include <set>
#include <tuple>

#include "scheduler/admission.h"
#include "scheduler/fair_share.h"
#include "scheduler/reclaim.h"

namespace atrium::sched {
namespace {

constexpr size_t kMaxIdLength = 128;

ResourceClass ClassOf(const AllocationRequest& r) { return {r.model, r.kind}; }

std::string Ms(int64_t ms) { return std::to_string(ms) + " ms"; }

// Why a victim's mark is let go when its reclaim is planned anew because
// one of its victims is no longer borrowed.
constexpr char kNoLongerBorrowed[] = "a victim's tenant is no longer above its guarantee";

}  // namespace

Result<std::unique_ptr<Scheduler>> Scheduler::Create(capacity::Fleet fleet,
                                                     SchedulerOptions options) {
  ATRIUM_RETURN_IF_ERROR(capacity::ValidateFleet(fleet));
  if (options.grace_ms < 0) return Error::InvalidArgument("grace_ms must not be negative");
  if (options.max_pending_per_tenant < 1 || options.max_pending_per_project < 1) {
    return Error::InvalidArgument("the pending request caps must be positive");
  }
  for (const capacity::Node& n : fleet.nodes()) {
    if (n.gpus.size() > size_t(kMaxGpusPerNode)) {
      return Error::InvalidArgument("node " + n.name + " has more than " +
                                    std::to_string(kMaxGpusPerNode) + " GPUs");
    }
  }
  options.policy_context.node_count = static_cast<int32_t>(fleet.nodes().size());
  auto policy = MakePolicy(options.policy, options.policy_context);
  if (!policy) return std::move(policy).error();
  return std::unique_ptr<Scheduler>(new Scheduler(
      std::make_unique<capacity::Fleet>(std::move(fleet)), std::move(options), std::move(*policy)));
}

Scheduler::Scheduler(std::unique_ptr<capacity::Fleet> fleet, SchedulerOptions options,
                     std::unique_ptr<Policy> policy)
    : fleet_(std::move(fleet)),
      options_(std::move(options)),
      policy_(std::move(policy)),
      state_(*fleet_) {
  std::vector<NodeState> views;
  for (int32_t i = 0; i < state_.node_count(); ++i) {
    views.push_back(state_.EngineView(i));
    if (const capacity::GpuModel* m = state_.model(i)) {
      model_capacity_[m->name] += int64_t(state_.node(i).gpus.size()) * kMilliPerGpu;
    }
  }
  engine_ =
      std::make_unique<Engine>(std::move(views), std::vector<int32_t>{}, *policy_, options_.seed);
}

void Scheduler::SetWorkload(const std::vector<AllocationRequest>& recent) {
  std::vector<WorkloadSample> samples;
  for (const AllocationRequest& r : recent) {
    if (r.kind != AllocationKind::kGpu && r.kind != AllocationKind::kShare) continue;
    const int32_t m = ModelIndex(r.model);
    if (m < 0 || m >= 64) continue;
    WorkloadSample sample;
    sample.cpu = r.cpu_milli;
    sample.types = r.model;
    sample.model_mask = uint64_t{1} << m;
    sample.num_gpu = r.kind == AllocationKind::kShare ? 1 : r.gpus;
    sample.milli = r.kind == AllocationKind::kShare ? r.milli : kMilliPerGpu;
    samples.push_back(std::move(sample));
  }
  options_.policy_context.workload = BuildTypicalPods(samples);
  CapacityChanged();
  auto policy = MakePolicy(options_.policy, options_.policy_context);
  if (!policy) return;  // the name was accepted by Create
  std::vector<NodeState> views;
  for (int32_t i = 0; i < state_.node_count(); ++i) views.push_back(state_.EngineView(i));
  // The engine refers to its policy: replace the engine first.
  engine_ =
      std::make_unique<Engine>(std::move(views), std::vector<int32_t>{}, **policy, options_.seed);
  policy_ = std::move(*policy);
}

// ---------------------------------------------------------------- records

DecisionRecord Scheduler::Record(DecisionKind kind, const Allocation& a, std::string reason) const {
  DecisionRecord r;
  r.kind = kind;
  r.allocation_id = a.id();
  r.tenant = a.request.tenant;
  r.at_ms = now_ms_;
  r.placement = a.placement;
  if (a.request.kind == AllocationKind::kMig && a.Placed()) {
    r.mig_profile = a.request.mig_profile;
    r.mig_start = a.mig_start;
  }
  r.reason = std::move(reason);
  return r;
}

// ------------------------------------------------------------ bookkeeping

namespace {
std::string ProjectKey(std::string_view tenant, std::string_view project) {
  std::string key(tenant);
  key += '\0';
  key += project;
  return key;
}
}  // namespace

void Scheduler::CountPending(Allocation& a, int delta) {
  auto add = [&](std::string key) {
    auto it = pending_.try_emplace(std::move(key), 0).first;
    it->second += delta;
    assert(it->second >= 0);
    if (it->second == 0) pending_.erase(it);
  };
  add(a.request.tenant);
  if (!a.request.project.empty()) add(ProjectKey(a.request.tenant, a.request.project));
  if (delta > 0) {
    auto it = shapes_.find(a.request);
    if (it == shapes_.end()) {
      AllocationRequest shape = a.request;
      shape.id.clear();
      it = shapes_.emplace(std::move(shape), ShapeQueue{}).first;
    }
    it->second.requests.emplace(a.seq, &a);
  } else if (auto it = shapes_.find(a.request); it != shapes_.end()) {
    it->second.requests.erase(a.seq);
    if (it->second.requests.empty()) emptied_shapes_.push_back(it);
  }
}

int64_t Scheduler::PendingCount(std::string_view tenant, std::string_view project) const {
  auto it = pending_.find(project.empty() ? std::string(tenant) : ProjectKey(tenant, project));
  return it == pending_.end() ? 0 : it->second;
}

void Scheduler::RefreshEngineNode(int32_t node) { engine_->SetNode(node, state_.EngineView(node)); }

void Scheduler::RefreshEngine(const Allocation& a) {
  for (const NodePlacement& p : a.placement) {
    if (auto i = state_.NodeIndex(p.node)) RefreshEngineNode(*i);
  }
}

bool Scheduler::ApplyPlaced(Allocation& a) {
  // Placement only proposes what Apply accepts; a refusal here is a bug,
  // caught by the tests, and leaves the allocation queued in release builds.
  Status s = state_.Apply(a);
  assert(s.has_value());
  if (!s) return false;
  ledger_.Add(a);
  RefreshEngine(a);
  ++revision_;
  CapacityChanged();
  return true;
}

void Scheduler::RemovePlaced(Allocation& a) {
  state_.Remove(a);
  ledger_.Remove(a);
  RefreshEngine(a);
  ++revision_;
  CapacityChanged();
}

void Scheduler::ForgetVictim(const Allocation& victim) {
  if (victim.state != AllocationState::kPreempting) return;
  auto r = reclaims_.find(victim.preempted_for);
  if (r == reclaims_.end()) return;
  r->second.erase(victim.id());
  if (r->second.empty()) reclaims_.erase(r);
}

std::string Scheduler::ReclaimerForVictim(const Allocation& victim) const {
  auto r = allocations_.find(victim.preempted_for);
  if (r == allocations_.end()) return "a request that left the queue";
  if (r->second.request.tenant == victim.request.tenant) {
    const AllocationRequest& q = r->second.request;
    auto t = tenants_.find(q.tenant);
    if (t != tenants_.end() && t->second.ProjectQuotaFor(q.project, ClassOf(q)) != nullptr) {
      return victim.preempted_for + " (within project " + q.project + "'s guarantee)";
    }
    return victim.preempted_for + " (within its tenant's guarantee)";
  }
  return "another tenant's guarantee";
}

std::optional<PlacementContext> Scheduler::ContextFor(const Allocation& a,
                                                      const ClusterState& state) const {
  auto t = tenants_.find(a.request.tenant);
  const capacity::GpuModel* model = capacity::FindGpuModel(a.request.model);
  if (t == tenants_.end() || model == nullptr) return std::nullopt;
  return PlacementContext{state, tenants_, t->second, a.request, *model};
}

QuotaCheck Scheduler::QuotaFor(const Allocation& a) const {
  auto t = tenants_.find(a.request.tenant);
  if (t == tenants_.end()) return {QuotaVerdict::kNeverFits, "unknown tenant " + a.request.tenant};
  return CheckQuota(t->second, ledger_, a.request, ClassOf(a.request), a.charge_milli);
}

QuotaVerdict Scheduler::QuotaVerdictFor(const Allocation& a) const {
  ++requests_examined_;
  auto t = tenants_.find(a.request.tenant);
  if (t == tenants_.end()) return QuotaVerdict::kNeverFits;
  return CheckQuotaVerdict(t->second, ledger_, a.request, ClassOf(a.request), a.charge_milli);
}

QuotaVerdict Scheduler::ShapeVerdict(const AllocationRequest& shape, const Allocation& head,
                                     VerdictRun& run) const {
  if (run.shape == nullptr || !SameQuotaKey(*run.shape, shape)) {
    run = {&shape, QuotaVerdictFor(head)};
  }
  return run.verdict;
}

Scheduler::Entitlement Scheduler::ComputeEntitlement() const {
  // Only requests within their guarantee can be entitled, and that verdict
  // is the same for every request of a shape; within a tenant's class they
  // are taken oldest first, each counted against its sub-level's guarantee
  // with the older entitled requests of that sub-level (for a tenant
  // without projects, the tenant's). A request of a shape that is not
  // entitled leaves the charge ahead in its sub-level (a shape has one)
  // unchanged, which only grows, so no later request of that shape is
  // entitled either: the shape is dropped there, and a backlog costs its
  // shapes, not its requests.
  struct Lane {
    std::map<uint64_t, Allocation*>::const_iterator next, end;
  };
  std::map<std::pair<std::string, ResourceClass>, std::vector<Lane>> classes;
  VerdictRun run;
  for (const auto& [shape, queue] : shapes_) {
    const auto& requests = queue.requests;
    if (requests.empty() || !Entitles(ShapeVerdict(shape, *requests.begin()->second, run))) {
      continue;
    }
    classes[{shape.tenant, ClassOf(shape)}].push_back({requests.begin(), requests.end()});
  }
  Entitlement out;
  for (auto& [key, lanes] : classes) {
    const auto& [tenant, rc] = key;
    const TenantPolicy& t = tenants_.find(tenant)->second;
    struct SubLevel {
      SubLevelQuota quota;
      int64_t before = 0;     // the charges of older entitled requests
      int64_t in_flight = 0;  // the part of them with a reclaim in flight
    };
    std::map<std::string_view, SubLevel> subs;
    int64_t before = 0, in_flight = 0;  // the same over the tenant's class
    while (!lanes.empty()) {
      auto oldest = std::min_element(lanes.begin(), lanes.end(), [](const Lane& x, const Lane& y) {
        return x.next->first < y.next->first;
      });
      const Allocation* a = oldest->next->second;
      ++requests_examined_;
      const std::string_view sub_name = SubLevelOf(t, a->request.project, rc);
      auto [it, inserted] = subs.try_emplace(sub_name);
      SubLevel& sub = it->second;
      if (inserted) sub.quota = SubLevelFor(t, ledger_, sub_name, rc);
      const int64_t base = a->request.priority == Priority::kPreemptible
                               ? sub.quota.usage.used
                               : sub.quota.usage.non_preemptible;
      if (base + sub.before + a->charge_milli <= sub.quota.guarantee) {
        out.ahead.emplace(a->id(), Ahead{before - in_flight, sub.before - sub.in_flight});
        before += a->charge_milli;
        sub.before += a->charge_milli;
        if (reclaims_.contains(a->id())) {
          in_flight += a->charge_milli;
          sub.in_flight += a->charge_milli;
        }
        if (++oldest->next != oldest->end) continue;
      }
      lanes.erase(oldest);
    }
  }
  return out;
}

double Scheduler::ShareOf(std::string_view tenant) const {
  auto t = tenants_.find(tenant);
  const double weight = t == tenants_.end() ? 1.0 : t->second.weight;
  return WeightedDominantShare(ledger_.ModelUsage(tenant), model_capacity_, weight);
}

Scheduler::IdList Scheduler::Reclaimers() const {
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [id, victims] : reclaims_) {
    auto r = allocations_.find(id);
    order.emplace_back(r == allocations_.end() ? 0 : r->second.seq, id);
  }
  std::sort(order.begin(), order.end());
  IdList out;
  for (auto& [seq, id] : order) out.push_back(std::move(id));
  return out;
}

Scheduler::IdList Scheduler::ReservingReclaimers(const Entitlement& entitled) const {
  IdList out = Reclaimers();
  std::erase_if(out, [&](const std::string& id) { return !entitled.contains(id); });
  return out;
}

std::vector<const Allocation*> Scheduler::VictimsOf(std::string_view reclaimer) const {
  std::vector<const Allocation*> out;
  auto r = reclaims_.find(reclaimer);
  if (r == reclaims_.end()) return out;
  for (const std::string& id : r->second) out.push_back(&allocations_.find(id)->second);
  std::sort(out.begin(), out.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  return out;
}

std::vector<Allocation*> Scheduler::OrderedQueue(const Entitlement& entitled,
                                                 const IdList& reserving,
                                                 const std::set<std::string, std::less<>>& freed,
                                                 bool borrowers) {
  struct Entry {
    int group;
    double share;
    int priority;
    uint64_t seq;
    Allocation* a;
  };
  std::map<std::string, double, std::less<>> shares;
  std::vector<Entry> entries;
  const std::set<std::string, std::less<>> reserved(reserving.begin(), reserving.end());
  auto add = [&](const std::string& id, Allocation& a) {
    if (a.state != AllocationState::kPending) return;
    // Reclaimers whose victims are gone, then reclaimers still waiting, both
    // strictly oldest first: the room was cleared for them in that order.
    if (freed.contains(id) || reserved.contains(id)) {
      entries.push_back({freed.contains(id) ? 0 : 1, 0.0, 0, a.seq, &a});
      return;
    }
    const int group = entitled.contains(id) ? 2 : 3;
    auto s = shares.find(a.request.tenant);
    if (s == shares.end()) s = shares.emplace(a.request.tenant, ShareOf(a.request.tenant)).first;
    entries.push_back({group, s->second, int(a.request.priority), a.seq, &a});
  };
  if (borrowers) {
    for (auto& [id, a] : allocations_) add(id, a);
  } else {
    std::set<std::string_view> ahead(freed.begin(), freed.end());
    ahead.insert(reserving.begin(), reserving.end());
    for (const auto& [id, before] : entitled.ahead) ahead.insert(id);
    for (std::string_view id : ahead) {
      if (auto it = allocations_.find(id); it != allocations_.end()) add(it->first, it->second);
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& x, const Entry& y) {
    return std::tie(x.group, x.share, x.priority, x.seq) <
           std::tie(y.group, y.share, y.priority, y.seq);
  });
  std::vector<Allocation*> out;
  for (const Entry& e : entries) out.push_back(e.a);
  return out;
}

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
  if (!all_fit(state_)) return true;
  ClusterState with = state_;
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
  ReclaimInput in{state_,
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

void Scheduler::Walk(const Entitlement& entitled, const std::set<std::string, std::less<>>& freed,
                     IdList& reserving, std::map<std::string, uint64_t, std::less<>>& tried,
                     DecisionRecords& out) {
  auto by_seq = [&](const std::string& x, const std::string& y) {
    return allocations_.find(x)->second.seq < allocations_.find(y)->second.seq;
  };
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
    if (StartReclaim(a, entitled.ahead.find(id)->second, out)) {
      if (a.state == AllocationState::kPending && reclaims_.contains(id)) {
        reserving.insert(std::upper_bound(reserving.begin(), reserving.end(), id, by_seq), id);
      }
    } else {
      tried[id] = revision_;
    }
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
  auto by_seq = [&](const std::string& x, const std::string& y) {
    return allocations_.find(x)->second.seq < allocations_.find(y)->second.seq;
  };
  for (Allocation* a : waiting) {
    if (a->state != AllocationState::kPending) continue;
    if (TryPlace(*a, &reserving, out)) continue;
    if (StartReclaim(*a, entitled.ahead.find(a->id())->second, out)) {
      if (a->state == AllocationState::kPending && reclaims_.contains(a->id())) {
        reserving.insert(std::upper_bound(reserving.begin(), reserving.end(), a->id(), by_seq),
                         a->id());
      }
    } else {
      tried[a->id()] = revision_;
    }
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

// ---------------------------------------------------------------- tenants

Status Scheduler::CheckTierChange(std::string_view tenant, IsolationTier tier) const {
  auto held = tenants_.find(tenant);
  if (held == tenants_.end() || held->second.tier == tier) return OkStatus();
  const std::vector<std::string> conflicts = TierConflicts(tenant, tier);
  if (conflicts.empty()) return OkStatus();
  constexpr size_t kNamed = 10;
  std::string names;
  for (size_t i = 0; i < std::min(kNamed, conflicts.size()); ++i) {
    names += (i == 0 ? "" : ", ") + conflicts[i];
  }
  if (conflicts.size() > kNamed) {
    names += " and " + std::to_string(conflicts.size() - kNamed) + " more";
  }
  const std::string where =
      tier == IsolationTier::kDedicatedGpu    ? "share a GPU with other tenants' work"
      : tier == IsolationTier::kDedicatedNode ? "share a node with other tenants' work"
                                              : "run outside pools dedicated to the tenant";
  return Error::FailedPrecondition(
      "tier " + std::string(TierName(tier)) +
      " would be broken where the tenant's work runs now: " + std::to_string(conflicts.size()) +
      " allocation(s) " + where + " (" + names + "); release or move them, then change the tier");
}

Result<DecisionRecords> Scheduler::SetTenant(TenantPolicy policy, int64_t now_ms) {
  ATRIUM_RETURN_IF_ERROR(ValidateTenantPolicy(policy));
  ATRIUM_RETURN_IF_ERROR(CheckTierChange(policy.id, policy.tier));
  std::string id = policy.id;
  tenants_.insert_or_assign(std::move(id), std::move(policy));
  CapacityChanged();
  scope_changed_ = true;
  DecisionRecords out;
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::Suspend(std::string_view tenant, int64_t now_ms) {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return Error::NotFound("unknown tenant " + std::string(tenant));
  t->second.suspended = true;
  CapacityChanged();
  DecisionRecords out;
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::Resume(std::string_view tenant, int64_t now_ms) {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return Error::NotFound("unknown tenant " + std::string(tenant));
  t->second.suspended = false;
  CapacityChanged();
  DecisionRecords out;
  Pass(now_ms, out);
  return out;
}

std::vector<std::string> Scheduler::TierConflicts(std::string_view tenant,
                                                  IsolationTier tier) const {
  std::vector<const Allocation*> own;
  if (tier == IsolationTier::kShared) return {};
  for (const auto& [id, a] : allocations_) {
    if (a.request.tenant == tenant && a.Placed()) own.push_back(&a);
  }
  std::sort(own.begin(), own.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  auto breaks = [&](const NodePlacement& part) {
    auto i = state_.NodeIndex(part.node);
    if (!i) return false;
    if (tier == IsolationTier::kDedicatedPool) {
      const auto& dedicated = state_.pool(*i).dedicated_tenant;
      if (!dedicated || *dedicated != tenant) return true;
    }
    if (tier != IsolationTier::kDedicatedGpu) return state_.HoldsOtherTenant(*i, tenant);
    const NodeRuntime& rt = state_.runtime(*i);
    for (int g : part.gpus) {
      for (const GpuUse& use : rt.gpus[size_t(g)].uses) {
        if (use.tenant != tenant) return true;
      }
    }
    return false;
  };
  std::vector<std::string> out;
  for (const Allocation* a : own) {
    if (std::any_of(a->placement.begin(), a->placement.end(), breaks)) out.push_back(a->id());
  }
  return out;
}

Result<DecisionRecords> Scheduler::Evict(std::string_view tenant, int64_t now_ms) {
  auto t = tenants_.find(tenant);
  if (t == tenants_.end()) return Error::NotFound("unknown tenant " + std::string(tenant));
  Advance(now_ms);
  DecisionRecords out;
  std::vector<Allocation*> own;
  for (auto& [id, a] : allocations_) {
    if (a.request.tenant == tenant) own.push_back(&a);
  }
  std::sort(own.begin(), own.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  for (Allocation* a : own) {
    if (!a->Placed()) CancelReclaim(a->id(), out);
  }
  for (Allocation* a : own) {
    ForgetVictim(*a);
    if (a->Placed()) {
      RemovePlaced(*a);
    } else {
      CountPending(*a, -1);
    }
    out.push_back(Record(DecisionKind::kReleased, *a, "tenant evicted"));
    allocations_.erase(a->id());
  }
  tenants_.erase(t);
  CapacityChanged();
  Pass(now_ms, out);
  return out;
}

// ------------------------------------------------------------ allocations

Result<DecisionRecords> Scheduler::Submit(AllocationRequest request, int64_t now_ms) {
  if (request.id.empty() || request.id.size() > kMaxIdLength) {
    return Error::InvalidArgument("allocation id must be 1 to " + std::to_string(kMaxIdLength) +
                                  " characters");
  }
  if (allocations_.contains(request.id)) {
    return Error::AlreadyExists("allocation " + request.id + " already exists");
  }
  if (PendingCount(request.tenant) >= options_.max_pending_per_tenant) {
    return Error::ResourceExhausted(
        "tenant " + request.tenant + " already has " +
            std::to_string(PendingCount(request.tenant)) +
            " pending allocation requests, the most a tenant may queue; cancel some or wait until "
            "some are placed",
        /*retry_after_s=*/0);
  }
  if (!request.project.empty() &&
      PendingCount(request.tenant, request.project) >= options_.max_pending_per_project) {
    return Error::ResourceExhausted(
        "project " + request.project + " already has " +
            std::to_string(PendingCount(request.tenant, request.project)) +
            " pending allocation requests, the most a project may queue; cancel some or wait until "
            "some are placed",
        /*retry_after_s=*/0);
  }
  Advance(now_ms);
  DecisionRecords out;
  auto t = tenants_.find(request.tenant);
  const std::string refusal = AdmissionRefusal(request, t == tenants_.end() ? nullptr : &t->second,
                                               state_, tenants_, ledger_);
  Allocation a;
  a.request = std::move(request);
  if (!refusal.empty()) {
    out.push_back(Record(DecisionKind::kRejected, a, refusal));
    Pass(now_ms, out);
    return out;
  }
  a.seq = next_seq_++;
  a.submitted_ms = now_ms_;
  a.charge_milli = ChargeMilli(a.request, *capacity::FindGpuModel(a.request.model));
  out.push_back(Record(DecisionKind::kQueued, a));
  const std::string id = a.id();
  CountPending(allocations_.emplace(id, std::move(a)).first->second, +1);
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::Release(std::string_view id, int64_t now_ms) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return Error::NotFound("unknown allocation " + std::string(id));
  Advance(now_ms);
  DecisionRecords out;
  Allocation& a = it->second;
  IdList freed_for;
  if (a.state == AllocationState::kPreempting) freed_for.push_back(a.preempted_for);
  ForgetVictim(a);
  if (a.Placed()) {
    RemovePlaced(a);
    out.push_back(Record(DecisionKind::kReleased, a, "released"));
  } else {
    CancelReclaim(a.id(), out);
    CountPending(a, -1);
    out.push_back(Record(DecisionKind::kReleased, a, "cancelled while queued"));
  }
  allocations_.erase(it);
  Pass(now_ms, out, std::move(freed_for));
  return out;
}

DecisionRecords Scheduler::AdvanceTime(int64_t now_ms) {
  DecisionRecords out;
  Pass(now_ms, out);
  return out;
}

// -------------------------------------------------------------- inventory

Result<int32_t> Scheduler::NodeByName(std::string_view node) const {
  auto i = state_.NodeIndex(node);
  if (!i) return Error::NotFound("unknown node " + std::string(node));
  return *i;
}

namespace {
bool OnNode(const Allocation& a, const std::string& node, int gpu) {
  for (const NodePlacement& p : a.placement) {
    if (p.node == node &&
        (gpu < 0 || std::find(p.gpus.begin(), p.gpus.end(), gpu) != p.gpus.end())) {
      return true;
    }
  }
  return false;
}
}  // namespace

void Scheduler::RequestMoves(int32_t node, int gpu, std::string_view reason, DecisionRecords& out,
                             bool only_unasked) {
  std::vector<Allocation*> hit;
  const std::string& name = state_.node(node).name;
  for (auto& [id, a] : allocations_) {
    if (OnNode(a, name, gpu) && !(only_unasked && !a.move_requested.empty())) hit.push_back(&a);
  }
  std::sort(hit.begin(), hit.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  for (Allocation* a : hit) {
    a->move_requested = std::string(reason);
    a->move_requested_ms = now_ms_;
    out.push_back(Record(DecisionKind::kMoveRequested, *a, std::string(reason)));
  }
}

Scheduler::IdList Scheduler::PreemptOnUnhealthyGpu(int32_t node, int gpu, const std::string& reason,
                                                   DecisionRecords& out) {
  std::vector<Allocation*> hit;
  const std::string& name = state_.node(node).name;
  for (auto& [id, a] : allocations_) {
    if (a.Placed() && a.request.priority == Priority::kPreemptible && OnNode(a, name, gpu)) {
      hit.push_back(&a);
    }
  }
  std::sort(hit.begin(), hit.end(),
            [](const Allocation* x, const Allocation* y) { return x->seq < y->seq; });
  IdList reclaimers;
  for (Allocation* a : hit) {
    if (a->state == AllocationState::kPreempting &&
        std::find(reclaimers.begin(), reclaimers.end(), a->preempted_for) == reclaimers.end()) {
      reclaimers.push_back(a->preempted_for);
    }
    ForgetVictim(*a);
    RemovePlaced(*a);
    out.push_back(Record(DecisionKind::kPreempted, *a, reason));
    allocations_.erase(a->id());
  }
  return reclaimers;
}

void Scheduler::ClearSettledMoves(int32_t node) {
  const std::string& name = state_.node(node).name;
  for (auto& [id, a] : allocations_) {
    if (a.move_requested.empty() || !OnNode(a, name, -1)) continue;
    bool unusable = false;
    for (const NodePlacement& p : a.placement) {
      const capacity::Node* on = fleet_->FindNode(p.node);
      if (on == nullptr) continue;
      unusable = unusable || on->draining;
      for (int g : p.gpus) {
        unusable = unusable || (size_t(g) < on->gpus.size() && !on->gpus[size_t(g)].healthy);
      }
    }
    if (!unusable) {
      a.move_requested.clear();
      a.move_requested_ms = -1;
    }
  }
}

bool Scheduler::FitsWithout(const Allocation& reclaimer,
                            const std::vector<const Allocation*>& gone) const {
  ClusterState trial = state_;
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

Result<DecisionRecords> Scheduler::Cordon(std::string_view node, int64_t now_ms) {
  auto i = NodeByName(node);
  if (!i) return std::move(i).error();
  const IdList affected = Reclaimers();
  fleet_->FindMutableNode(node)->cordoned = true;
  CapacityChanged();
  Advance(now_ms);
  DecisionRecords out;
  ReplanReclaims(affected, "node " + std::string(node) + " is cordoned", out);
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::Drain(std::string_view node, int64_t now_ms) {
  auto i = NodeByName(node);
  if (!i) return std::move(i).error();
  const IdList affected = Reclaimers();
  fleet_->FindMutableNode(node)->draining = true;
  CapacityChanged();
  Advance(now_ms);
  DecisionRecords out;
  const std::string reason = "node " + std::string(node) + " is draining";
  RequestMoves(*i, -1, reason, out);
  ReplanReclaims(affected, reason, out);
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::Uncordon(std::string_view node, int64_t now_ms) {
  auto i = NodeByName(node);
  if (!i) return std::move(i).error();
  capacity::Node* n = fleet_->FindMutableNode(node);
  n->cordoned = false;
  n->draining = false;
  ClearSettledMoves(*i);
  CapacityChanged();
  DecisionRecords out;
  Pass(now_ms, out);
  return out;
}

Result<DecisionRecords> Scheduler::SetGpuHealth(std::string_view node, int gpu, bool healthy,
                                                int64_t now_ms, std::string_view note) {
  auto i = NodeByName(node);
  if (!i) return std::move(i).error();
  capacity::Node* n = fleet_->FindMutableNode(node);
  if (gpu < 0 || size_t(gpu) >= n->gpus.size()) {
    return Error::NotFound("node " + std::string(node) + " has no GPU " + std::to_string(gpu));
  }
  const IdList affected = Reclaimers();
  n->gpus[size_t(gpu)].healthy = healthy;
  RefreshEngineNode(*i);
  CapacityChanged();
  Advance(now_ms);
  DecisionRecords out;
  IdList freed_for;
  std::string change = "GPU " + std::to_string(gpu) + " of " + std::string(node) +
                       (healthy ? " is healthy again" : " is unhealthy");
  if (!note.empty()) change += " (" + std::string(note) + ")";
  if (healthy) {
    ClearSettledMoves(*i);
  } else {
    // Preemptible work cannot run on a broken GPU: a grace period helps
    // nobody. Other work is asked to move and keeps running.
    freed_for = PreemptOnUnhealthyGpu(*i, gpu, change, out);
    RequestMoves(*i, gpu, change, out);
  }
  ReplanReclaims(affected, change, out);
  Pass(now_ms, out, std::move(freed_for));
  return out;
}

DecisionRecords Scheduler::RequestOutstandingMoves(int64_t now_ms) {
  Advance(now_ms);
  DecisionRecords out;
  IdList freed_for;
  for (int32_t i = 0; i < state_.node_count(); ++i) {
    const capacity::Node& n = state_.node(i);
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (n.gpus[g].healthy) continue;
      const std::string change = "GPU " + std::to_string(g) + " of " + n.name + " is unhealthy";
      // Reclaims that lose a victim here are re-planned; the others' room
      // was planned with the GPU already unhealthy.
      const IdList lost = PreemptOnUnhealthyGpu(i, int(g), change, out);
      RequestMoves(i, int(g), change, out, /*only_unasked=*/true);
      ReplanReclaims(lost, change, out);
      freed_for.insert(freed_for.end(), lost.begin(), lost.end());
    }
    if (n.draining) {
      RequestMoves(i, -1, "node " + n.name + " is draining", out, /*only_unasked=*/true);
    }
  }
  Pass(now_ms, out, std::move(freed_for));
  return out;
}

// ---------------------------------------------------------------- queries

const Allocation* Scheduler::Find(std::string_view id) const {
  auto it = allocations_.find(id);
  return it == allocations_.end() ? nullptr : &it->second;
}

std::vector<Allocation> Scheduler::Allocations() const {
  std::vector<Allocation> out;
  for (const auto& [id, a] : allocations_) out.push_back(a);
  std::sort(out.begin(), out.end(),
            [](const Allocation& x, const Allocation& y) { return x.seq < y.seq; });
  return out;
}

std::vector<std::string> Scheduler::Queue() const {
  std::vector<std::string> out;
  const Entitlement entitled = ComputeEntitlement();
  for (Allocation* a :
       const_cast<Scheduler*>(this)->OrderedQueue(entitled, ReservingReclaimers(entitled), {})) {
    out.push_back(a->id());
  }
  return out;
}

Result<std::string> Scheduler::Explain(std::string_view id, Audience audience) const {
  const bool staff = audience == Audience::kStaff;
  const Allocation* a = Find(id);
  if (a == nullptr) return Error::NotFound("unknown allocation " + std::string(id));
  if (a->Placed()) {
    DecisionRecord r = Record(DecisionKind::kPlaced, *a);
    std::string out = "running on " + DescribePlacement(a->placement);
    if (!r.mig_profile.empty()) out += " mig " + r.mig_profile + "@" + std::to_string(r.mig_start);
    out += " since " + Ms(a->placed_ms);
    if (!a->move_requested.empty()) {
      out += "; asked to move at " + Ms(a->move_requested_ms) + ": " + a->move_requested;
    }
    if (a->state == AllocationState::kPreempting) {
      out += "; preempted at " + Ms(a->preempt_at_ms) + " to reclaim borrowed capacity for ";
      const Allocation* reclaimer = Find(a->preempted_for);
      if (staff) {
        out += a->preempted_for +
               (reclaimer != nullptr ? " of tenant " + reclaimer->request.tenant : std::string());
      } else {
        out += ReclaimerForVictim(*a);
      }
    }
    return out;
  }
  std::vector<std::string> lines;
  const std::vector<std::string> queue = Queue();
  const size_t pos = size_t(std::find(queue.begin(), queue.end(), a->id()) - queue.begin());
  lines.push_back("queued since " + Ms(a->submitted_ms) + ", position " + std::to_string(pos + 1) +
                  " of " + std::to_string(queue.size()));
  auto t = tenants_.find(a->request.tenant);
  if (t != tenants_.end() && t->second.suspended) {
    lines.push_back("tenant " + t->first +
                    " is suspended: its queued requests are not placed until it is resumed");
  }
  const QuotaCheck q = QuotaFor(*a);
  const Entitlement entitled = ComputeEntitlement();
  switch (q.verdict) {
    case QuotaVerdict::kWithinGuarantee:
      lines.push_back("within guarantee: " + q.reason);
      break;
    case QuotaVerdict::kWithinGuaranteeOverLimit:
      lines.push_back(q.reason);
      break;
    case QuotaVerdict::kBorrows:
      lines.push_back("borrows above the guarantee (preemptible, reclaimable): " + q.reason);
      break;
    default:
      lines.push_back(q.reason);
      break;
  }
  if (Entitles(q.verdict) && !entitled.contains(a->id())) {
    auto tp = tenants_.find(a->request.tenant);
    const ResourceClass rc = ClassOf(a->request);
    const bool project =
        tp != tenants_.end() && tp->second.ProjectQuotaFor(a->request.project, rc) != nullptr;
    lines.push_back("the guarantee left is taken by older queued requests of " +
                    (project ? "project " + a->request.project + " of " : std::string()) +
                    "tenant " + a->request.tenant + "; it waits behind them");
  }
  if (auto ctx = ContextFor(*a, state_)) {
    if (auto p = FindPlacement(*ctx, nullptr)) {
      if (q.verdict == QuotaVerdict::kWaits || q.verdict == QuotaVerdict::kNeverFits) {
        lines.push_back("room exists; only the quota holds it back");
      } else if (q.verdict == QuotaVerdict::kWithinGuaranteeOverLimit) {
        lines.push_back("room exists; it is placed once the reclaim gives the limit headroom back");
      } else {
        lines.push_back(KeepsReservations(*a, *p, ReservingReclaimers(entitled))
                            ? "a placement exists now; it is taken at the next decision"
                            : "the room that fits is reserved for a reclaim in flight");
      }
    } else {
      lines.push_back("placement: " + DiagnoseNoFit(*ctx));
    }
  }
  const auto victims = VictimsOf(a->id());
  if (!victims.empty()) {
    // Staff see every victim; a tenant sees only its own allocations named,
    // never which or how many of another tenant's work make room for it.
    std::string ids;
    int own = 0;
    bool others = false;
    int64_t grace_end = 0;
    for (const Allocation* v : victims) {
      grace_end = std::max(grace_end, v->preempt_at_ms);
      if (!staff && v->request.tenant != a->request.tenant) {
        others = true;
        continue;
      }
      ids += (ids.empty() ? "" : ", ") + v->id();
      ++own;
    }
    if (staff) {
      lines.push_back("waits for reclaim of " + std::to_string(victims.size()) + " allocations (" +
                      ids + "); grace ends at " + Ms(grace_end));
    } else if (!others) {
      lines.push_back("waits for reclaim of " + std::to_string(own) +
                      " of its tenant's own allocations (" + ids + "); grace ends at " +
                      Ms(grace_end));
    } else {
      lines.push_back("waits for reclaim of borrowed capacity" +
                      (own > 0 ? " (and of " + std::to_string(own) +
                                     " of its tenant's own allocations: " + ids + ")"
                               : std::string()) +
                      "; grace ends at " + Ms(grace_end));
    }
  } else if (Entitles(q.verdict) && entitled.contains(a->id())) {
    lines.push_back("no borrowed capacity would make room; waits for releases");
  } else if (q.verdict == QuotaVerdict::kBorrows) {
    lines.push_back("borrowing work waits for idle capacity and never triggers reclaim");
  }
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// ---------------------------------------------------------------- restore

namespace {

// MIG instances stored before charges were whole sevenths rounded down carry
// the nearest-milli charge (1g 143, 2g 286, 3g 429); Restore takes them and
// charges them as today.
bool IsPreSeventhsMigCharge(const Allocation& a, const capacity::GpuModel& model) {
  if (a.request.kind != AllocationKind::kMig) return false;
  const capacity::MigProfile* p = model.FindMigProfile(a.request.mig_profile);
  return p != nullptr && a.charge_milli == (p->compute_slices * 1000 + 3) / 7;
}

}  // namespace

Status Scheduler::Restore(const std::vector<Allocation>& allocations) {
  if (!allocations_.empty()) {
    return Error::FailedPrecondition("restore needs a scheduler without allocations");
  }
  std::vector<Allocation> sorted = allocations;
  std::sort(sorted.begin(), sorted.end(),
            [](const Allocation& x, const Allocation& y) { return x.seq < y.seq; });
  std::set<std::string> ids;
  for (Allocation& a : sorted) {
    if (a.id().empty() || !ids.insert(a.id()).second) {
      return Error::InvalidArgument("restore: duplicate or empty allocation id " + a.id());
    }
    if (!tenants_.contains(a.request.tenant)) {
      return Error::InvalidArgument("restore: allocation " + a.id() + " of unknown tenant " +
                                    a.request.tenant);
    }
    const capacity::GpuModel* model = capacity::FindGpuModel(a.request.model);
    if (model == nullptr || model->name != a.request.model) {
      return Error::InvalidArgument("restore: allocation " + a.id() + " names unknown model " +
                                    a.request.model);
    }
    const int64_t charge = ChargeMilli(a.request, *model);
    if (a.charge_milli != charge && !IsPreSeventhsMigCharge(a, *model)) {
      return Error::InvalidArgument("restore: allocation " + a.id() + " has a wrong charge");
    }
    a.charge_milli = charge;
  }
  ClusterState trial = state_;
  for (const Allocation& a : sorted) {
    if (a.Placed()) ATRIUM_RETURN_IF_ERROR(trial.Apply(a));
  }
  state_ = std::move(trial);
  for (const Allocation& a : sorted) {
    if (a.Placed()) ledger_.Add(a);
    next_seq_ = std::max(next_seq_, a.seq + 1);
    now_ms_ = std::max({now_ms_, a.submitted_ms, a.placed_ms});
    if (a.state == AllocationState::kPreempting) reclaims_[a.preempted_for].insert(a.id());
    Allocation& held = allocations_.emplace(a.id(), a).first->second;
    if (!held.Placed()) CountPending(held, +1);
  }
  for (int32_t i = 0; i < state_.node_count(); ++i) RefreshEngineNode(i);
  CapacityChanged();
  scope_changed_ = true;
  return OkStatus();
}

}  // namespace atrium::sched
