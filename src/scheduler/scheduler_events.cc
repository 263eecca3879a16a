// The events a scheduler is fed — tenant changes, submissions and releases,
// inventory changes — each followed by a pass.
#include <algorithm>

#include "scheduler/admission.h"
#include "scheduler/scheduler.h"

namespace atrium::sched {
namespace {

constexpr size_t kMaxIdLength = 128;

}  // namespace

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
        if (!use.scrubbing && use.tenant != tenant) return true;
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
    // The operator's word that the GPU is clean: what a failed scrub kept
    // from use is free again.
    for (auto it = scrubs_.begin(); it != scrubs_.end();) {
      const ScrubHold& h = it->second;
      if (h.state == ScrubState::kFailed && h.node == node && h.gpu == gpu) {
        state_.RemoveScrub(h);
        it = scrubs_.erase(it);
        ++revision_;
      } else {
        ++it;
      }
    }
    RefreshEngineNode(*i);
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

// ------------------------------------------------------------------ scrub

Result<DecisionRecords> Scheduler::FinishScrub(std::string_view allocation, std::string_view node,
                                               int gpu, bool ok, int64_t now_ms,
                                               std::string_view detail) {
  auto it = scrubs_.find(std::make_tuple(std::string(node), gpu, std::string(allocation)));
  if (it == scrubs_.end() || it->second.state != ScrubState::kScrubbing) {
    return Error::NotFound("no scrub of " + std::string(node) + " gpu " + std::to_string(gpu) +
                           " for " + std::string(allocation) + " is in flight");
  }
  auto i = NodeByName(node);
  if (!i) return std::move(i).error();
  --scrubs_in_flight_;
  ++revision_;
  if (ok) {
    state_.RemoveScrub(it->second);
    scrubs_.erase(it);
    RefreshEngineNode(*i);
    CapacityChanged();
    Advance(now_ms);
    DecisionRecords out;
    Pass(now_ms, out);
    return out;
  }
  // The room stays held and the GPU goes out of service: whatever else runs
  // on it is handled as on any GPU that turned unhealthy.
  ScrubHold& h = it->second;
  h.state = ScrubState::kFailed;
  h.reason = std::string(kScrubFailed) + ": " +
             (detail.empty() ? std::string("no detail") : std::string(detail));
  // The note reaches the reasons of other tenants' allocations on the GPU
  // (preempted, asked to move): no command output in it.
  return SetGpuHealth(node, gpu, /*healthy=*/false, now_ms, kScrubFailed);
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

}  // namespace atrium::sched
