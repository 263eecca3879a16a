#include "scheduling/inventory_report.h"

#include <map>
#include <utility>

#include "capacity/mig.h"

namespace atrium::scheduling {
namespace {

bool NodeSchedulable(const capacity::Node& n) { return !n.cordoned && !n.draining; }

}  // namespace

NodeInfo DescribeNode(const sched::Scheduler& s, int32_t i, std::string_view viewer) {
  const sched::ClusterState& state = s.cluster();
  const capacity::Node& n = state.node(i);
  const sched::NodeRuntime& rt = state.runtime(i);
  NodeInfo info;
  info.name = n.name;
  info.pool = n.pool;
  info.rack = n.rack;
  const capacity::NodePool& pool = state.pool(i);
  info.site = pool.site;
  info.region = pool.region;
  info.gpu_model = n.gpu_model;
  info.cpu_milli = n.cpu_milli;
  info.memory_mib = n.memory_mib;
  info.cpu_used_milli = rt.cpu_used;
  info.memory_used_mib = rt.memory_used;
  info.nvlink_groups = n.nvlink_groups;
  info.driver_version = n.driver_version;
  info.cuda_version = n.cuda_version;
  info.cordoned = n.cordoned;
  info.draining = n.draining;
  std::vector<sched::ScrubHold> scrubs;
  for (sched::ScrubHold& h : s.Scrubs()) {
    if (h.node == n.name) scrubs.push_back(std::move(h));
  }
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    const capacity::Gpu& gpu = n.gpus[g];
    const sched::GpuState& gs = rt.gpus[g];
    GpuInfo gi;
    gi.node = n.name;
    gi.index = gpu.index;
    gi.model = gpu.model;
    gi.memory_mib = gpu.memory_mib;
    gi.healthy = gpu.healthy;
    gi.cordoned = gpu.cordoned;
    gi.mig_mode = gs.mig.has_value();
    gi.used_milli = gs.used_milli;
    gi.used_memory_mib = gs.used_memory_mib;
    gi.free = NodeSchedulable(n) && state.GpuUsable(i, int(g)) && gs.uses.empty() && !gi.mig_mode;
    if (gi.free) ++info.gpus_free;
    for (const sched::ScrubHold& h : scrubs) {
      if (h.gpu != int(g)) continue;
      if (h.state == sched::ScrubState::kScrubbing) {
        gi.scrubbing = true;
        // Whose allocation ended here is the platform's to know, never
        // another tenant's (nor, once ended, worth a tenant's listing).
        if (viewer.empty()) gi.scrubbing_for.push_back(h.allocation);
      } else if (gi.health_reason.empty()) {
        // The scrub command's output is the platform's to read.
        gi.health_reason = viewer.empty() ? h.reason : sched::TenantReasonOf(h.reason);
      }
    }
    gi.state = !gi.healthy       ? "unhealthy"
               : gi.scrubbing    ? "scrubbing"
               : gi.cordoned     ? "cordoned"
               : gs.uses.empty() ? "free"
                                 : "in_use";
    for (const sched::GpuUse& use : gs.uses) {
      if (use.scrubbing) continue;
      if (!viewer.empty() && use.tenant != viewer) continue;
      GpuUseInfo u;
      u.allocation_id = use.allocation;
      u.tenant_id = use.tenant;
      u.milli = use.milli;
      u.memory_mib = use.memory_mib;
      if (const sched::Allocation* a = s.Find(use.allocation)) {
        u.kind = std::string(sched::KindName(a->request.kind));
        if (a->request.kind == sched::AllocationKind::kMig) {
          u.mig_profile = a->request.mig_profile;
          u.mig_start = a->mig_start;
        }
      }
      gi.uses.push_back(std::move(u));
    }
    info.gpus.push_back(std::move(gi));
  }
  return info;
}

std::vector<CapacityRow> DescribeCapacity(const sched::Scheduler& s) {
  const sched::ClusterState& state = s.cluster();
  std::vector<CapacityRow> rows;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (pool, model) → row
  std::map<size_t, std::map<std::string, int>> mig_room;        // row → profile → instances
  for (int32_t i = 0; i < state.node_count(); ++i) {
    const capacity::Node& n = state.node(i);
    if (n.gpu_model.empty()) continue;
    auto key = std::make_pair(n.pool, n.gpu_model);
    auto it = index.find(key);
    if (it == index.end()) {
      CapacityRow row;
      row.pool = n.pool;
      row.region = std::string(state.region(i));
      row.model = n.gpu_model;
      it = index.emplace(key, rows.size()).first;
      rows.push_back(std::move(row));
    }
    CapacityRow& row = rows[it->second];
    const bool schedulable = NodeSchedulable(n);
    ++row.nodes;
    if (schedulable) ++row.nodes_schedulable;
    const capacity::GpuModel* model = state.model(i);
    const sched::NodeRuntime& rt = state.runtime(i);
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      ++row.gpus;
      if (!schedulable || !state.GpuUsable(i, int(g)) || !rt.leased_by.empty()) continue;
      ++row.gpus_usable;
      const sched::GpuState& gs = rt.gpus[g];
      if (gs.uses.empty() && !gs.mig) ++row.gpus_free;
      if (!gs.mig && !gs.whole) row.free_share_milli += sched::kMilliPerGpu - gs.used_milli;
      if (model && model->mig_capable) {
        std::optional<capacity::MigLayout> layout = gs.mig;
        if (!layout && gs.uses.empty()) layout.emplace(*model);
        if (layout) {
          for (const capacity::MigProfileRoom& room : capacity::FreeSpace(*layout).placeable) {
            mig_room[it->second][room.profile->name] += room.max_additional;
          }
        }
      }
    }
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const capacity::GpuModel* model = capacity::FindGpuModel(rows[r].model);
    if (!model || !model->mig_capable) continue;
    for (const capacity::MigProfile& p : model->mig_profiles) {
      rows[r].mig.push_back({p.name, mig_room[r][p.name]});
    }
  }
  return rows;
}

}  // namespace atrium::scheduling
