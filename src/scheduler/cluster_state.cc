#include "scheduler/cluster_state.h"

#include <algorithm>
#include <tuple>

namespace atrium::sched {

int32_t ModelIndex(std::string_view model) {
  const auto& all = capacity::AllGpuModels();
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].name == model) return static_cast<int32_t>(i);
  }
  return -1;
}

ClusterState::ClusterState(const capacity::Fleet& fleet) : fleet_(&fleet) {
  const auto& nodes = fleet.nodes();
  const auto& racks = fleet.racks();
  const auto& sites = fleet.sites();
  const auto& pools = fleet.pools();
  rack_draw_.assign(racks.size(), 0);
  site_draw_.assign(sites.size(), 0);
  auto index_of = [](const auto& list, std::string_view name) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].name == name) return static_cast<int32_t>(i);
    }
    return int32_t{-1};
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const capacity::Node& n = nodes[i];
    node_index_[n.name] = static_cast<int32_t>(i);
    models_.push_back(n.gpu_model.empty() ? nullptr : capacity::FindGpuModel(n.gpu_model));
    model_index_.push_back(models_.back() ? ModelIndex(models_.back()->name) : -1);
    pool_of_.push_back(index_of(pools, n.pool));
    const int32_t rack = index_of(racks, n.rack);
    rack_of_.push_back(rack);
    const int32_t site = rack >= 0 ? index_of(sites, racks[size_t(rack)].site) : -1;
    site_of_.push_back(site);
    if (rack >= 0) rack_draw_[size_t(rack)] += n.idle_power_watts;
    if (site >= 0) site_draw_[size_t(site)] += n.idle_power_watts;
    NodeRuntime rt;
    rt.gpus.resize(n.gpus.size());
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (n.gpus[g].mig_enabled && models_.back() != nullptr) {
        rt.gpus[g].mig.emplace(*models_.back());
      }
    }
    nodes_.push_back(std::move(rt));
  }
}

std::optional<int32_t> ClusterState::NodeIndex(std::string_view name) const {
  auto it = node_index_.find(name);
  if (it == node_index_.end()) return std::nullopt;
  return it->second;
}

const capacity::NodePool& ClusterState::pool(int32_t i) const {
  return fleet_->pools()[size_t(pool_of_[size_t(i)])];
}

bool ClusterState::GpuUsable(int32_t i, int g) const {
  const capacity::Gpu& gpu = node(i).gpus[size_t(g)];
  return gpu.healthy && !gpu.cordoned;
}

bool ClusterState::HoldsOtherTenant(int32_t i, std::string_view tenant) const {
  for (const auto& [t, count] : nodes_[size_t(i)].tenants) {
    if (t != tenant && count > 0) return true;
  }
  return false;
}

int64_t ClusterState::GpuWatts(const capacity::GpuModel& model, int64_t milli) {
  return (int64_t{model.tdp_watts} * milli + 999) / 1000;
}

int64_t ClusterState::MigWatts(const capacity::GpuModel& model, int compute_slices) {
  constexpr int64_t kSlices = capacity::kMigComputeSlices;
  return (int64_t{model.tdp_watts} * compute_slices + kSlices - 1) / kSlices;
}

int32_t MigModeUsedMilli(int compute_slices) {
  constexpr int32_t kSlices = capacity::kMigComputeSlices;
  return (compute_slices * kMilliPerGpu + kSlices / 2) / kSlices;
}

namespace {

int32_t MilliOnGpu(const Allocation& a, const capacity::MigProfile* profile) {
  switch (a.request.kind) {
    case AllocationKind::kShare:
      return a.request.milli;
    case AllocationKind::kMig:
      return profile ? MigMilli(profile->compute_slices) : 0;
    default:
      return kMilliPerGpu;
  }
}

}  // namespace

Status ClusterState::CheckPart(const Allocation& a, int32_t i, const NodePlacement& p) const {
  const capacity::Node& n = node(i);
  const NodeRuntime& rt = nodes_[size_t(i)];
  const capacity::GpuModel* model = models_[size_t(i)];
  const std::string where = "allocation " + a.id() + " on node " + n.name;
  if (model == nullptr || model->name != a.request.model) {
    return Error::FailedPrecondition(where + ": node has no " + a.request.model + " GPUs");
  }
  if (!rt.leased_by.empty()) {
    return Error::FailedPrecondition(where + ": node is leased by " + rt.leased_by);
  }
  if (rt.cpu_used + a.request.cpu_milli > n.cpu_milli ||
      rt.memory_used + a.request.memory_mib > n.memory_mib) {
    return Error::FailedPrecondition(where + ": not enough host CPU or memory");
  }
  if (a.request.kind == AllocationKind::kNode) {
    if (!rt.tenants.empty()) return Error::FailedPrecondition(where + ": node is not empty");
    if (p.gpus.size() != n.gpus.size()) {
      return Error::FailedPrecondition(where + ": a lease holds every GPU of the node");
    }
  }
  const size_t want = a.request.kind == AllocationKind::kGpu    ? size_t(a.request.gpus)
                      : a.request.kind == AllocationKind::kNode ? n.gpus.size()
                                                                : 1;
  if (p.gpus.size() != want) {
    return Error::FailedPrecondition(where + ": expected " + std::to_string(want) + " GPUs");
  }
  for (size_t k = 0; k < p.gpus.size(); ++k) {
    const int g = p.gpus[k];
    if (g < 0 || size_t(g) >= n.gpus.size() || (k > 0 && p.gpus[k - 1] >= g)) {
      return Error::FailedPrecondition(where + ": bad GPU index list");
    }
    const GpuState& gs = rt.gpus[size_t(g)];
    const std::string gpu = where + " GPU " + std::to_string(g);
    if (gs.whole) return Error::FailedPrecondition(gpu + " is taken whole");
    switch (a.request.kind) {
      case AllocationKind::kGpu:
      case AllocationKind::kNode:
        if (gs.mig) return Error::FailedPrecondition(gpu + " is in MIG mode");
        if (!gs.uses.empty()) return Error::FailedPrecondition(gpu + " is shared");
        break;
      case AllocationKind::kShare:
        if (gs.mig) return Error::FailedPrecondition(gpu + " is in MIG mode");
        if (gs.used_milli + a.request.milli > kMilliPerGpu) {
          return Error::FailedPrecondition(
              gpu + " has " + std::to_string(kMilliPerGpu - gs.used_milli) + " milli left");
        }
        if (gs.used_memory_mib + a.request.mem_cap_mib > n.gpus[size_t(g)].memory_mib) {
          return Error::FailedPrecondition(gpu + " lacks GPU memory for the cap");
        }
        break;
      case AllocationKind::kMig: {
        const capacity::MigProfile* profile = model->FindMigProfile(a.request.mig_profile);
        if (profile == nullptr) {
          return Error::FailedPrecondition(where + ": unknown MIG profile " +
                                           a.request.mig_profile);
        }
        if (!gs.mig && !gs.uses.empty()) return Error::FailedPrecondition(gpu + " is shared");
        const capacity::MigLayout layout = gs.mig ? *gs.mig : capacity::MigLayout(*model);
        Status s = capacity::CanPlace(layout, *profile, a.mig_start);
        if (!s) return Error::FailedPrecondition(gpu + ": " + s.error().message);
        break;
      }
    }
  }
  return OkStatus();
}

void ClusterState::ApplyPart(const Allocation& a, int32_t i, const NodePlacement& p, int64_t sign,
                             bool scrub) {
  const capacity::Node& n = node(i);
  NodeRuntime& rt = nodes_[size_t(i)];
  const capacity::GpuModel& model = *models_[size_t(i)];
  const capacity::MigProfile* profile = a.request.kind == AllocationKind::kMig
                                            ? model.FindMigProfile(a.request.mig_profile)
                                            : nullptr;
  const int32_t milli = MilliOnGpu(a, profile);
  const bool lease = a.request.kind == AllocationKind::kNode;
  if (!scrub) {
    rt.cpu_used += sign * (lease ? n.cpu_milli : a.request.cpu_milli);
    rt.memory_used += sign * (lease ? n.memory_mib : a.request.memory_mib);
    if (lease) rt.leased_by = sign > 0 ? a.id() : std::string();
    if (sign > 0) {
      ++rt.tenants[a.request.tenant];
    } else if (auto it = rt.tenants.find(a.request.tenant);
               it != rt.tenants.end() && --it->second <= 0) {
      rt.tenants.erase(it);
    }
  }
  int64_t watts = 0;
  for (int g : p.gpus) {
    GpuState& gs = rt.gpus[size_t(g)];
    const capacity::Gpu& gpu = n.gpus[size_t(g)];
    int64_t memory = gpu.memory_mib;
    if (a.request.kind == AllocationKind::kShare) memory = a.request.mem_cap_mib;
    if (profile != nullptr) memory = profile->memory_mib;
    if (!scrub) {
      watts +=
          profile != nullptr ? MigWatts(model, profile->compute_slices) : GpuWatts(model, milli);
    }
    if (sign > 0) {
      // Kept sorted by allocation id (scrub holds after allocations of the
      // same id), so the state does not depend on the order allocations
      // were applied in (Restore applies in seq order).
      GpuUse use{a.id(), a.request.tenant, milli, memory, scrub};
      gs.uses.insert(std::upper_bound(gs.uses.begin(), gs.uses.end(), use,
                                      [](const GpuUse& x, const GpuUse& y) {
                                        return std::tie(x.allocation, x.scrubbing) <
                                               std::tie(y.allocation, y.scrubbing);
                                      }),
                     std::move(use));
      gs.whole = a.request.kind == AllocationKind::kGpu || lease;
      if (profile != nullptr) {
        if (!gs.mig) gs.mig.emplace(model);
        (void)gs.mig->Place(*profile, a.mig_start, a.id());
      }
    } else {
      std::erase_if(
          gs.uses, [&](const GpuUse& u) { return u.allocation == a.id() && u.scrubbing == scrub; });
      gs.whole = false;
      if (profile != nullptr && gs.mig) {
        (void)gs.mig->Remove(a.mig_start);
        if (gs.mig->empty() && !gpu.mig_enabled) gs.mig.reset();
      }
    }
    if (profile != nullptr) {
      gs.used_milli = gs.mig ? MigModeUsedMilli(gs.mig->used_compute_slices()) : 0;
    } else {
      gs.used_milli += static_cast<int32_t>(sign * milli);
    }
    gs.used_memory_mib += sign * memory;
  }
  if (rack_of_[size_t(i)] >= 0) rack_draw_[size_t(rack_of_[size_t(i)])] += sign * watts;
  if (site_of_[size_t(i)] >= 0) site_draw_[size_t(site_of_[size_t(i)])] += sign * watts;
}

Status ClusterState::Apply(const Allocation& a) {
  if (a.placement.empty()) {
    return Error::FailedPrecondition("allocation " + a.id() + " has no placement");
  }
  std::vector<int32_t> indexes;
  for (const NodePlacement& p : a.placement) {
    auto i = NodeIndex(p.node);
    if (!i) return Error::FailedPrecondition("allocation " + a.id() + ": unknown node " + p.node);
    if (std::find(indexes.begin(), indexes.end(), *i) != indexes.end()) {
      return Error::FailedPrecondition("allocation " + a.id() + " names node " + p.node + " twice");
    }
    ATRIUM_RETURN_IF_ERROR(CheckPart(a, *i, p));
    indexes.push_back(*i);
  }
  for (size_t k = 0; k < indexes.size(); ++k) ApplyPart(a, indexes[k], a.placement[k], 1);
  return OkStatus();
}

void ClusterState::Remove(const Allocation& a) {
  for (const NodePlacement& p : a.placement) {
    if (auto i = NodeIndex(p.node)) ApplyPart(a, *i, p, -1);
  }
}

namespace {

// The one-GPU allocation whose footprint a scrub hold keeps.
Allocation ScrubFootprint(const ScrubHold& hold) {
  Allocation a;
  a.request.id = hold.allocation;
  a.request.tenant = hold.tenant;
  a.request.kind = hold.kind;
  a.request.model = hold.model;
  a.request.gpus = 1;
  a.request.mig_profile = hold.mig_profile;
  a.request.milli = hold.milli;
  a.request.mem_cap_mib = hold.mem_cap_mib;
  a.state = AllocationState::kRunning;
  a.placement = {NodePlacement{hold.node, {hold.gpu}}};
  a.mig_start = hold.mig_start;
  return a;
}

}  // namespace

Status ClusterState::ApplyScrub(const ScrubHold& hold) {
  if (hold.kind == AllocationKind::kNode) {
    return Error::FailedPrecondition("scrub hold " + DescribeScrub(hold) +
                                     " must name one GPU's kind (gpu, mig or share)");
  }
  const Allocation a = ScrubFootprint(hold);
  auto i = NodeIndex(hold.node);
  if (!i) return Error::FailedPrecondition("scrub hold " + DescribeScrub(hold) + ": unknown node");
  ATRIUM_RETURN_IF_ERROR(CheckPart(a, *i, a.placement[0]));
  ApplyPart(a, *i, a.placement[0], 1, /*scrub=*/true);
  return OkStatus();
}

void ClusterState::RemoveScrub(const ScrubHold& hold) {
  const Allocation a = ScrubFootprint(hold);
  if (auto i = NodeIndex(hold.node)) ApplyPart(a, *i, a.placement[0], -1, /*scrub=*/true);
}

void ClusterState::RemoveScrubs(const std::vector<ScrubHold>& holds) {
  for (const ScrubHold& h : holds) RemoveScrub(h);
}

NodeState ClusterState::EngineView(int32_t i) const {
  const capacity::Node& n = node(i);
  const NodeRuntime& rt = nodes_[size_t(i)];
  NodeState s;
  s.cpu_left = n.cpu_milli - rt.cpu_used;
  s.mem_left = n.memory_mib - rt.memory_used;
  s.model = model_index_[size_t(i)];
  s.gpu_count = static_cast<int32_t>(std::min<size_t>(n.gpus.size(), kMaxGpusPerNode));
  for (int g = 0; g < s.gpu_count; ++g) {
    const GpuState& gs = rt.gpus[size_t(g)];
    const bool usable = GpuUsable(i, g) && !gs.whole && !gs.mig && rt.leased_by.empty();
    s.gpu_free[size_t(g)] = usable ? kMilliPerGpu - gs.used_milli : 0;
  }
  return s;
}

}  // namespace atrium::sched
