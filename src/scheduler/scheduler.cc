// The scheduler's state and bookkeeping: creation, records, the pending
// counts and shape queues, entitlement, queue order and queries. The pass
// is in scheduler_pass.cc, the events that run one in scheduler_events.cc,
// Explain in scheduler_explain.cc and Restore in scheduler_restore.cc.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <cassert>
#include <set>
#include <tuple>

#include "scheduler/fair_share.h"
#include "scheduler/scheduler_internal.h"

namespace atrium::sched {

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
  if (options_.scrub_gpus) {
    for (ScrubHold& h : ScrubHoldsOf(a, now_ms_)) {
      // The room was just given back, so the hold always fits.
      Status held = state_.ApplyScrub(h);
      assert(held.has_value());
      (void)held;
      ++scrubs_in_flight_;
      scrubs_.insert_or_assign({h.node, h.gpu, h.allocation}, std::move(h));
    }
  }
  ledger_.Remove(a);
  RefreshEngine(a);
  ++revision_;
  CapacityChanged();
}

const ClusterState& Scheduler::SettledState() const {
  if (scrubs_in_flight_ == 0) return state_;
  if (!settled_ || settled_revision_ != revision_) {
    settled_.emplace(state_);
    for (const auto& [key, h] : scrubs_) {
      if (h.state == ScrubState::kScrubbing) settled_->RemoveScrub(h);
    }
    settled_revision_ = revision_;
  }
  return *settled_;
}

bool Scheduler::WaitsForScrub(const Allocation& a) const {
  if (scrubs_in_flight_ == 0) return false;
  auto ctx = ContextFor(a, SettledState());
  return ctx && FindPlacement(*ctx, nullptr).has_value();
}

std::vector<ScrubHold> Scheduler::Scrubs() const {
  std::vector<ScrubHold> out;
  out.reserve(scrubs_.size());
  for (const auto& [key, h] : scrubs_) out.push_back(h);
  return out;
}

std::vector<ScrubHold> Scheduler::ScrubsOf(std::string_view id) const {
  std::vector<ScrubHold> out;
  for (const auto& [key, h] : scrubs_) {
    if (h.allocation == id) out.push_back(h);
  }
  return out;
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

}  // namespace atrium::sched
