#include "scheduling/codec.h"

#include <algorithm>

#include "scheduler/node_state.h"

namespace atrium::scheduling {

FleetNodeRecord NodeFlagsOf(const capacity::Node& n) {
  FleetNodeRecord r;
  r.name = n.name;
  r.pool = n.pool;
  r.rack = n.rack;
  r.cpu_milli = n.cpu_milli;
  r.memory_mib = n.memory_mib;
  r.gpu_model = n.gpu_model;
  for (const capacity::Gpu& g : n.gpus) {
    r.gpus.push_back({g.index, g.model, g.memory_mib, g.mig_enabled, g.healthy, g.cordoned});
  }
  r.nvlink_groups = n.nvlink_groups;
  r.idle_power_watts = n.idle_power_watts;
  r.cordoned = n.cordoned;
  r.draining = n.draining;
  r.driver_version = n.driver_version;
  r.cuda_version = n.cuda_version;
  return r;
}

FleetRecord FleetToRecord(const capacity::Fleet& fleet, const std::string& spec) {
  FleetRecord r;
  r.spec = spec;
  for (const auto& s : fleet.sites()) r.sites.push_back({s.name, s.region, s.power_budget_watts});
  for (const auto& k : fleet.racks()) r.racks.push_back({k.name, k.site, k.power_budget_watts});
  for (const auto& p : fleet.pools()) {
    r.pools.push_back({p.name, p.region, p.site,
                       std::vector<std::string>(p.labels.begin(), p.labels.end()),
                       p.dedicated_tenant.value_or(""), p.allowed_tenants});
  }
  for (const auto& n : fleet.nodes()) r.nodes.push_back(NodeFlagsOf(n));
  return r;
}

FleetRecord WithStoredOperatorFlags(FleetRecord given, const FleetRecord& stored) {
  for (FleetNodeRecord& node : given.nodes) {
    auto was = std::find_if(stored.nodes.begin(), stored.nodes.end(),
                            [&](const FleetNodeRecord& n) { return n.name == node.name; });
    if (was == stored.nodes.end()) continue;
    node.cordoned = node.cordoned || was->cordoned;
    node.draining = node.draining || was->draining;
    for (FleetGpuRecord& gpu : node.gpus) {
      for (const FleetGpuRecord& old : was->gpus) {
        if (old.index != gpu.index) continue;
        gpu.cordoned = gpu.cordoned || old.cordoned;
        gpu.healthy = gpu.healthy && old.healthy;
      }
    }
  }
  return given;
}

Result<capacity::Fleet> FleetFromRecord(const FleetRecord& record) {
  capacity::Fleet fleet;
  for (const auto& s : record.sites) {
    ATRIUM_RETURN_IF_ERROR(fleet.AddSite(
        {.name = s.name, .region = s.region, .power_budget_watts = s.power_budget_watts}));
  }
  for (const auto& k : record.racks) {
    ATRIUM_RETURN_IF_ERROR(fleet.AddRack(
        {.name = k.name, .site = k.site, .power_budget_watts = k.power_budget_watts}));
  }
  for (const auto& p : record.pools) {
    capacity::NodePool pool{.name = p.name, .region = p.region, .site = p.site};
    pool.labels.insert(p.labels.begin(), p.labels.end());
    if (!p.dedicated_tenant.empty()) pool.dedicated_tenant = p.dedicated_tenant;
    pool.allowed_tenants = p.allowed_tenants;
    ATRIUM_RETURN_IF_ERROR(fleet.AddPool(std::move(pool)));
  }
  for (const auto& n : record.nodes) {
    capacity::Node node{.name = n.name,
                        .pool = n.pool,
                        .rack = n.rack,
                        .cpu_milli = n.cpu_milli,
                        .memory_mib = n.memory_mib,
                        .gpu_model = n.gpu_model,
                        .nvlink_groups = n.nvlink_groups,
                        .idle_power_watts = n.idle_power_watts,
                        .cordoned = n.cordoned,
                        .draining = n.draining,
                        .driver_version = n.driver_version,
                        .cuda_version = n.cuda_version};
    for (const auto& g : n.gpus) {
      node.gpus.push_back({.index = static_cast<int>(g.index),
                           .model = g.model,
                           .memory_mib = g.memory_mib,
                           .mig_enabled = g.mig_enabled,
                           .healthy = g.healthy,
                           .cordoned = g.cordoned});
    }
    ATRIUM_RETURN_IF_ERROR(fleet.AddNode(std::move(node)));
  }
  if (auto valid = capacity::ValidateFleet(fleet); !valid) {
    return Error::InvalidArgument("the stored fleet is invalid: " + valid.error().message);
  }
  return fleet;
}

AllocationRecord AllocationToRecord(const sched::Allocation& a, const std::string& created_by,
                                    int64_t now_ms) {
  const sched::AllocationRequest& q = a.request;
  AllocationRecord r;
  r.id = q.id;
  r.tenant_id = q.tenant;
  r.project = q.project;
  r.kind = std::string(sched::KindName(q.kind));
  r.priority = std::string(sched::PriorityName(q.priority));
  r.model = q.model;
  r.gpus = q.gpus;
  r.nodes = q.nodes;
  r.mig_profile = q.mig_profile;
  r.milli = q.milli;
  r.gpu_memory_mib = q.mem_cap_mib;
  r.cpu_milli = q.cpu_milli;
  r.memory_mib = q.memory_mib;
  r.pool = q.pool;
  r.region = q.region;
  r.state = std::string(sched::StateName(a.state));
  r.seq = static_cast<int64_t>(a.seq);
  r.submitted_ms = a.submitted_ms;
  r.placed_ms = a.placed_ms;
  for (const auto& p : a.placement) r.placement.push_back({p.node, p.gpus});
  r.mig_start = a.mig_start;
  r.charge_milli = a.charge_milli;
  r.preempt_at_ms = a.preempt_at_ms;
  r.preempted_for = a.preempted_for;
  r.move_requested = a.move_requested;
  r.move_requested_ms = a.move_requested_ms;
  r.min_driver_version = q.requirements.min_driver_version;
  r.min_cuda_version = q.requirements.min_cuda_version;
  r.required_gpu_models = q.requirements.gpu_models;
  r.created_by = created_by;
  r.updated_at = now_ms;
  return r;
}

GpuScrubRecord ScrubToRecord(const sched::ScrubHold& h) {
  GpuScrubRecord r;
  r.node = h.node;
  r.gpu = h.gpu;
  r.allocation_id = h.allocation;
  r.tenant_id = h.tenant;
  r.kind = std::string(sched::KindName(h.kind));
  r.model = h.model;
  r.mig_profile = h.mig_profile;
  r.mig_start = h.mig_start;
  r.milli = h.milli;
  r.gpu_memory_mib = h.mem_cap_mib;
  r.since_ms = h.since_ms;
  r.state = std::string(sched::ScrubStateName(h.state));
  r.reason = h.reason;
  return r;
}

Result<sched::ScrubHold> ScrubFromRecord(const GpuScrubRecord& r) {
  sched::ScrubHold h;
  h.node = r.node;
  if (r.gpu < 0 || r.gpu >= sched::kMaxGpusPerNode) {
    return Error::InvalidArgument("scrub of " + r.node + " names GPU " + std::to_string(r.gpu));
  }
  h.gpu = static_cast<int>(r.gpu);
  h.allocation = r.allocation_id;
  h.tenant = r.tenant_id;
  ATRIUM_ASSIGN_OR_RETURN(h.kind, sched::ParseKind(r.kind));
  h.model = r.model;
  h.mig_profile = r.mig_profile;
  h.mig_start = static_cast<int>(r.mig_start);
  h.milli = static_cast<int32_t>(r.milli);
  h.mem_cap_mib = r.gpu_memory_mib;
  h.since_ms = r.since_ms;
  ATRIUM_ASSIGN_OR_RETURN(h.state, sched::ParseScrubState(r.state));
  h.reason = r.reason;
  return h;
}

Result<sched::Allocation> AllocationFromRecord(const AllocationRecord& r) {
  sched::Allocation a;
  sched::AllocationRequest& q = a.request;
  q.id = r.id;
  q.tenant = r.tenant_id;
  q.project = r.project;
  ATRIUM_ASSIGN_OR_RETURN(q.kind, sched::ParseKind(r.kind));
  ATRIUM_ASSIGN_OR_RETURN(q.priority, sched::ParsePriority(r.priority));
  q.model = r.model;
  q.gpus = static_cast<int32_t>(r.gpus);
  q.nodes = static_cast<int32_t>(r.nodes);
  q.mig_profile = r.mig_profile;
  q.milli = static_cast<int32_t>(r.milli);
  q.mem_cap_mib = r.gpu_memory_mib;
  q.cpu_milli = r.cpu_milli;
  q.memory_mib = r.memory_mib;
  q.pool = r.pool;
  q.region = r.region;
  q.requirements.min_driver_version = r.min_driver_version;
  q.requirements.min_cuda_version = r.min_cuda_version;
  q.requirements.gpu_models = r.required_gpu_models;
  ATRIUM_ASSIGN_OR_RETURN(a.state, sched::ParseState(r.state));
  a.seq = static_cast<uint64_t>(r.seq);
  a.submitted_ms = r.submitted_ms;
  a.placed_ms = r.placed_ms;
  for (const auto& p : r.placement) a.placement.push_back({p.node, p.gpus});
  a.mig_start = static_cast<int>(r.mig_start);
  a.charge_milli = r.charge_milli;
  a.preempt_at_ms = r.preempt_at_ms;
  a.preempted_for = r.preempted_for;
  a.move_requested = r.move_requested;
  a.move_requested_ms = r.move_requested_ms;
  return a;
}

std::string ApiKindOf(const AllocationRecord& r) {
  return r.kind == "gpu" && r.nodes > 1 ? "gang" : r.kind;
}

Result<sched::TenantPolicy> PolicyFromRecords(const Tenant& tenant,
                                              const std::vector<QuotaRecord>& quotas,
                                              const std::vector<ProjectRecord>& projects) {
  sched::TenantPolicy p;
  p.id = tenant.id;
  ATRIUM_ASSIGN_OR_RETURN(p.tier, sched::ParseTier(tenant.tier));
  p.weight = static_cast<double>(tenant.weight);
  p.regions = tenant.regions;
  p.suspended = tenant.state != "active";
  for (const auto& project : projects) {
    if (project.tenant_id == tenant.id) p.projects[project.name];
  }
  for (const auto& q : quotas) {
    if (q.tenant_id != tenant.id) continue;
    ATRIUM_ASSIGN_OR_RETURN(sched::ResourceClass rc,
                            sched::ResourceClass::Parse(q.model + "/" + q.kind));
    sched::Quota quota{q.guarantee_milli, q.limit_milli};
    if (q.project.empty()) {
      p.quotas[rc] = quota;
    } else {
      p.projects[q.project][rc] = quota;
    }
  }
  return p;
}

std::vector<EffectiveQuota> EffectiveQuotas(const std::vector<QuotaRecord>& rows) {
  sched::TenantPolicy requested;
  requested.id = rows.empty() ? "" : rows.front().tenant_id;
  for (const QuotaRecord& q : rows) {
    auto rc = sched::ResourceClass::Parse(q.model + "/" + q.kind);
    if (!rc.has_value()) continue;
    const sched::Quota quota{q.guarantee_milli, q.limit_milli};
    if (q.project.empty()) {
      requested.quotas[*rc] = quota;
    } else {
      requested.projects[q.project][*rc] = quota;
    }
  }
  const sched::EffectiveSplit split = sched::ClampProjectSplit(requested);
  std::vector<EffectiveQuota> out;
  for (const QuotaRecord& q : rows) {
    EffectiveQuota e;
    e.row = q;
    e.requested_guarantee_milli = q.guarantee_milli;
    e.requested_limit_milli = q.limit_milli;
    auto rc = sched::ResourceClass::Parse(q.model + "/" + q.kind);
    if (rc.has_value()) {
      if (q.project.empty()) {
        for (const auto& [project, classes] : split.clamped) {
          if (std::find(classes.begin(), classes.end(), *rc) != classes.end()) {
            e.clamped_projects.push_back(project);
          }
        }
      } else if (const sched::Quota* effective = split.policy.ProjectQuotaFor(q.project, *rc)) {
        e.row.guarantee_milli = effective->guarantee;
        e.row.limit_milli = effective->limit;
        e.over_committed = !(*effective == sched::Quota{q.guarantee_milli, q.limit_milli});
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace atrium::scheduling
