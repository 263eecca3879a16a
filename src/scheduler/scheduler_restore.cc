// Scheduler::Restore: a scheduler rebuilt from what its shell persisted.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "scheduler/scheduler.h"

namespace atrium::sched {

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

Status Scheduler::Restore(const std::vector<Allocation>& allocations,
                          const std::vector<ScrubHold>& scrubs) {
  if (!allocations_.empty() || !scrubs_.empty()) {
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
  std::map<std::tuple<std::string, int, std::string>, ScrubHold> holds;
  for (const ScrubHold& h : scrubs) {
    if (h.allocation.empty() ||
        !holds.emplace(std::make_tuple(h.node, h.gpu, h.allocation), h).second) {
      return Error::InvalidArgument("restore: duplicate or unnamed scrub hold " + DescribeScrub(h));
    }
    if (h.kind == AllocationKind::kNode) {
      return Error::InvalidArgument("restore: scrub hold " + DescribeScrub(h) +
                                    " must name one GPU's kind (gpu, mig or share)");
    }
  }
  // Holds go on in key order, so the state does not depend on the order
  // the store listed them in.
  for (const auto& [key, h] : holds) ATRIUM_RETURN_IF_ERROR(trial.ApplyScrub(h));
  state_ = std::move(trial);
  for (auto& [key, h] : holds) {
    if (h.state == ScrubState::kScrubbing) ++scrubs_in_flight_;
    now_ms_ = std::max(now_ms_, h.since_ms);
  }
  scrubs_ = std::move(holds);
  ++revision_;
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
