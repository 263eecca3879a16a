// Store: the GPU fleet, quotas and projects, allocations, and the one
// transaction a scheduling call commits.
#include <nlohmann/json.hpp>
#include <string_view>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;
using Json = nlohmann::json;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

namespace {

// Nested integer lists (NVLink groups) and placements as JSON text.
std::string EncodeGroups(const std::vector<std::vector<int>>& groups) {
  return Json(groups).dump();
}

std::vector<std::vector<int>> DecodeGroups(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::vector<std::vector<int>> out;
  if (!j.is_array()) return out;
  for (const auto& group : j) {
    std::vector<int> g;
    if (group.is_array()) {
      for (const auto& i : group) {
        if (i.is_number_integer()) g.push_back(i.get<int>());
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

std::string EncodePlacement(const std::vector<AllocationPlacementRecord>& placement) {
  Json j = Json::array();
  for (const auto& p : placement) j.push_back({{"node", p.node}, {"gpus", p.gpus}});
  return j.dump();
}

std::vector<AllocationPlacementRecord> DecodePlacement(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::vector<AllocationPlacementRecord> out;
  if (!j.is_array()) return out;
  for (const auto& item : j) {
    if (!item.is_object()) continue;
    AllocationPlacementRecord p;
    if (item.contains("node") && item["node"].is_string()) p.node = item["node"].get<std::string>();
    if (item.contains("gpus") && item["gpus"].is_array()) {
      for (const auto& g : item["gpus"]) {
        if (g.is_number_integer()) p.gpus.push_back(g.get<int>());
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

constexpr char kAllocationColumns[] =
    "id, tenant_id, project, kind, priority, model, gpus, nodes, mig_profile, milli, "
    "gpu_memory_mib, cpu_milli, memory_mib, pool, region, state, seq, submitted_ms, placed_ms, "
    "placement, mig_start, charge_milli, preempt_at_ms, preempted_for, reason, ended_ms, "
    "created_by, updated_at, move_requested, move_requested_ms, min_driver_version, "
    "min_cuda_version, required_gpu_models";
// The columns above, counted from the list itself.
constexpr size_t CountColumns(std::string_view list) {
  size_t n = 1;
  for (char c : list) n += c == ',' ? 1 : 0;
  return n;
}
constexpr size_t kAllocationColumnCount = CountColumns(kAllocationColumns);

AllocationRecord AllocationFromRow(const Row& r) {
  AllocationRecord a;
  a.id = r.Text(0);
  a.tenant_id = r.Text(1);
  a.project = r.Text(2);
  a.kind = r.Text(3);
  a.priority = r.Text(4);
  a.model = r.Text(5);
  a.gpus = r.Int(6);
  a.nodes = r.Int(7);
  a.mig_profile = r.Text(8);
  a.milli = r.Int(9);
  a.gpu_memory_mib = r.Int(10);
  a.cpu_milli = r.Int(11);
  a.memory_mib = r.Int(12);
  a.pool = r.Text(13);
  a.region = r.Text(14);
  a.state = r.Text(15);
  a.seq = r.Int(16);
  a.submitted_ms = r.Int(17);
  a.placed_ms = r.Int(18);
  a.placement = DecodePlacement(r.Text(19));
  a.mig_start = r.Int(20);
  a.charge_milli = r.Int(21);
  a.preempt_at_ms = r.Int(22);
  a.preempted_for = r.Text(23);
  a.reason = r.Text(24);
  a.ended_ms = r.Int(25);
  a.created_by = r.Text(26);
  a.updated_at = r.Int(27);
  a.move_requested = r.Text(28);
  a.move_requested_ms = r.Int(29);
  a.min_driver_version = r.Text(30);
  a.min_cuda_version = r.Text(31);
  a.required_gpu_models = DecodeList(r.Text(32));
  return a;
}

std::vector<Value> AllocationValues(const AllocationRecord& a) {
  return {a.id,
          a.tenant_id,
          a.project,
          a.kind,
          a.priority,
          a.model,
          a.gpus,
          a.nodes,
          a.mig_profile,
          a.milli,
          a.gpu_memory_mib,
          a.cpu_milli,
          a.memory_mib,
          a.pool,
          a.region,
          a.state,
          a.seq,
          a.submitted_ms,
          a.placed_ms,
          EncodePlacement(a.placement),
          a.mig_start,
          a.charge_milli,
          a.preempt_at_ms,
          a.preempted_for,
          a.reason,
          a.ended_ms,
          a.created_by,
          a.updated_at,
          a.move_requested,
          a.move_requested_ms,
          a.min_driver_version,
          a.min_cuda_version,
          EncodeList(a.required_gpu_models)};
}

QuotaRecord QuotaFromRow(const Row& r) {
  QuotaRecord q;
  q.tenant_id = r.Text(0);
  q.project = r.Text(1);
  q.model = r.Text(2);
  q.kind = r.Text(3);
  q.guarantee_milli = r.Int(4);
  q.limit_milli = r.Int(5);
  q.updated_at = r.Int(6);
  return q;
}

constexpr char kQuotaColumns[] =
    "tenant_id, project, model, kind, guarantee_milli, limit_milli, updated_at";

}  // namespace

// ---------------------------------------------------------------- fleet

Result<std::optional<FleetRecord>> Store::LoadFleet() {
  // One read transaction would be nicer; the fleet is only replaced at
  // start-up, before anything reads it, so separate reads are consistent.
  ATRIUM_ASSIGN_OR_RETURN(auto head, db_->Exec("SELECT spec, updated_at FROM fleet WHERE id = 1"));
  if (head.rows.empty()) return std::optional<FleetRecord>();
  FleetRecord f;
  f.spec = head.rows[0].Text(0);
  f.updated_at = head.rows[0].Int(1);
  ATRIUM_ASSIGN_OR_RETURN(
      auto sites,
      db_->Exec("SELECT name, region, power_budget_watts FROM fleet_sites ORDER BY ord"));
  for (const auto& r : sites.rows) f.sites.push_back({r.Text(0), r.Text(1), r.Int(2)});
  ATRIUM_ASSIGN_OR_RETURN(
      auto racks, db_->Exec("SELECT name, site, power_budget_watts FROM fleet_racks ORDER BY ord"));
  for (const auto& r : racks.rows) f.racks.push_back({r.Text(0), r.Text(1), r.Int(2)});
  ATRIUM_ASSIGN_OR_RETURN(
      auto pools, db_->Exec("SELECT name, region, site, labels, dedicated_tenant, allowed_tenants "
                            "FROM fleet_pools ORDER BY ord"));
  for (const auto& r : pools.rows) {
    f.pools.push_back(
        {r.Text(0), r.Text(1), r.Text(2), DecodeList(r.Text(3)), r.Text(4), DecodeList(r.Text(5))});
  }
  ATRIUM_ASSIGN_OR_RETURN(
      auto nodes,
      db_->Exec("SELECT name, pool, rack, cpu_milli, memory_mib, gpu_model, gpu_count, "
                "nvlink_groups, idle_power_watts, cordoned, draining, driver_version, cuda_version "
                "FROM fleet_nodes ORDER BY ord"));
  std::map<std::string, size_t> index;
  for (const auto& r : nodes.rows) {
    FleetNodeRecord n;
    n.name = r.Text(0);
    n.pool = r.Text(1);
    n.rack = r.Text(2);
    n.cpu_milli = r.Int(3);
    n.memory_mib = r.Int(4);
    n.gpu_model = r.Text(5);
    n.gpus.resize(static_cast<size_t>(std::max<int64_t>(0, r.Int(6))));
    n.nvlink_groups = DecodeGroups(r.Text(7));
    n.idle_power_watts = r.Int(8);
    n.cordoned = r.Int(9) != 0;
    n.draining = r.Int(10) != 0;
    n.driver_version = r.Text(11);
    n.cuda_version = r.Text(12);
    index[n.name] = f.nodes.size();
    f.nodes.push_back(std::move(n));
  }
  ATRIUM_ASSIGN_OR_RETURN(
      auto gpus, db_->Exec("SELECT node, idx, model, memory_mib, mig_enabled, healthy, cordoned "
                           "FROM fleet_gpus ORDER BY node, idx"));
  for (const auto& r : gpus.rows) {
    auto it = index.find(r.Text(0));
    if (it == index.end()) return Error::Internal("GPU row of unknown node " + r.Text(0));
    FleetNodeRecord& n = f.nodes[it->second];
    int64_t i = r.Int(1);
    if (i < 0 || static_cast<size_t>(i) >= n.gpus.size()) {
      return Error::Internal("GPU row " + std::to_string(i) + " out of range for node " + n.name);
    }
    n.gpus[size_t(i)] = {i, r.Text(2), r.Int(3), r.Int(4) != 0, r.Int(5) != 0, r.Int(6) != 0};
  }
  return std::optional<FleetRecord>(std::move(f));
}

Status Store::ReplaceFleet(const FleetRecord& f) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    for (const char* table :
         {"fleet", "fleet_sites", "fleet_racks", "fleet_pools", "fleet_nodes", "fleet_gpus"}) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(std::string("DELETE FROM ") + table, {}));
    }
    ATRIUM_RETURN_IF_ERROR(c.Exec("INSERT INTO fleet (id, spec, updated_at) VALUES (1, $1, $2)",
                                  {f.spec, f.updated_at}));
    int64_t ord = 0;
    for (const auto& site : f.sites) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO fleet_sites (name, ord, region, power_budget_watts) VALUES ($1, $2, $3, $4)",
          {site.name, ord++, site.region, site.power_budget_watts}));
    }
    for (const auto& rack : f.racks) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO fleet_racks (name, ord, site, power_budget_watts) VALUES ($1, $2, $3, $4)",
          {rack.name, ord++, rack.site, rack.power_budget_watts}));
    }
    for (const auto& pool : f.pools) {
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("INSERT INTO fleet_pools (name, ord, region, site, labels, dedicated_tenant, "
                 "allowed_tenants) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                 {pool.name, ord++, pool.region, pool.site, EncodeList(pool.labels),
                  pool.dedicated_tenant, EncodeList(pool.allowed_tenants)}));
    }
    for (const auto& n : f.nodes) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO fleet_nodes (name, ord, pool, rack, cpu_milli, memory_mib, "
          "gpu_model, gpu_count, nvlink_groups, idle_power_watts, cordoned, draining, "
          "driver_version, cuda_version) "
          "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
          {n.name, ord++, n.pool, n.rack, n.cpu_milli, n.memory_mib, n.gpu_model,
           static_cast<int64_t>(n.gpus.size()), EncodeGroups(n.nvlink_groups), n.idle_power_watts,
           Flag(n.cordoned), Flag(n.draining), n.driver_version, n.cuda_version}));
      for (size_t i = 0; i < n.gpus.size(); ++i) {
        const auto& g = n.gpus[i];
        ATRIUM_RETURN_IF_ERROR(
            c.Exec("INSERT INTO fleet_gpus (node, idx, model, memory_mib, mig_enabled, healthy, "
                   "cordoned) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                   {n.name, static_cast<int64_t>(i), g.model, g.memory_mib, Flag(g.mig_enabled),
                    Flag(g.healthy), Flag(g.cordoned)}));
      }
    }
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

// ------------------------------------------------------ quotas, projects

Result<std::vector<QuotaRecord>> Store::ListQuotas(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kQuotaColumns +
                                                   " FROM quotas WHERE tenant_id = $1 ORDER BY "
                                                   "project, model, kind",
                                               {scope.tenant_id}));
  std::vector<QuotaRecord> out;
  for (const auto& r : rows.rows) out.push_back(QuotaFromRow(r));
  return out;
}

Result<std::vector<QuotaRecord>> Store::ListAllQuotasForScheduler() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kQuotaColumns +
                                               " FROM quotas ORDER BY tenant_id, project, model, "
                                               "kind"));
  std::vector<QuotaRecord> out;
  for (const auto& r : rows.rows) out.push_back(QuotaFromRow(r));
  return out;
}

Result<std::vector<ProjectRecord>> Store::ListProjects(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec("SELECT tenant_id, name, created_at FROM projects WHERE tenant_id = $1 ORDER BY "
                "name",
                {scope.tenant_id}));
  std::vector<ProjectRecord> out;
  for (const auto& r : rows.rows) out.push_back({r.Text(0), r.Text(1), r.Int(2)});
  return out;
}

Result<std::vector<ProjectRecord>> Store::ListAllProjectsForScheduler() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec("SELECT tenant_id, name, created_at FROM projects ORDER BY tenant_id, name"));
  std::vector<ProjectRecord> out;
  for (const auto& r : rows.rows) out.push_back({r.Text(0), r.Text(1), r.Int(2)});
  return out;
}

Result<ProjectRecord> Store::GetProject(const TenantScope& scope, const std::string& name) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT tenant_id, name, created_at FROM projects WHERE tenant_id = $1 "
                           "AND name = $2",
                           {scope.tenant_id, name}));
  if (rows.rows.empty()) return Error::NotFound("project not found");
  const auto& r = rows.rows[0];
  return ProjectRecord{r.Text(0), r.Text(1), r.Int(2)};
}

// ---------------------------------------------------------------- allocations

Result<AllocationRecord> Store::GetAllocation(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kAllocationColumns +
                                        " FROM allocations WHERE tenant_id = $1 AND id = $2",
                                    {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("allocation not found");
  return AllocationFromRow(rows.rows[0]);
}

Result<AllocationRecord> Store::GetAllocationForPlatform(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kAllocationColumns +
                                                   " FROM allocations WHERE id = $1",
                                               {id}));
  if (rows.rows.empty()) return Error::NotFound("allocation not found");
  return AllocationFromRow(rows.rows[0]);
}

namespace {
Result<Page<AllocationRecord>> ListAllocationsWhere(sql::Database& db, const std::string* tenant_id,
                                                    const std::string& state,
                                                    const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  std::string q = std::string("SELECT ") + kAllocationColumns + " FROM allocations WHERE id > $1";
  std::vector<Value> params = {opts.after};
  if (tenant_id) {
    params.push_back(*tenant_id);
    q += " AND tenant_id = $" + std::to_string(params.size());
  }
  if (!state.empty()) {
    params.push_back(state);
    q += " AND state = $" + std::to_string(params.size());
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY id LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db.Exec(q, params));
  std::vector<AllocationRecord> items;
  for (const auto& r : rows.rows) items.push_back(AllocationFromRow(r));
  return MakePage(std::move(items), limit, [](const AllocationRecord& a) { return a.id; });
}
}  // namespace

Result<Page<AllocationRecord>> Store::ListAllocations(const TenantScope& scope,
                                                      const AllocationFilter& filter,
                                                      const ListOptions& opts) {
  return ListAllocationsWhere(*db_, &scope.tenant_id, filter.state, opts);
}

Result<Page<AllocationRecord>> Store::ListAllocationsForPlatform(const AllocationFilter& filter,
                                                                 const ListOptions& opts) {
  return ListAllocationsWhere(*db_, filter.tenant_id.empty() ? nullptr : &filter.tenant_id,
                              filter.state, opts);
}

Result<std::vector<AllocationRecord>> Store::ListHeldAllocationsForScheduler() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kAllocationColumns +
                                    " FROM allocations WHERE state IN ('pending', 'running', "
                                    "'preempting') ORDER BY seq, id"));
  std::vector<AllocationRecord> out;
  for (const auto& r : rows.rows) out.push_back(AllocationFromRow(r));
  return out;
}

Result<std::vector<AllocationToMeter>> Store::ListAllocationsToMeterForMetering(
    int64_t changed_since_ms) {
  // A managed deployment's replica is a job that never requeues: its one
  // allocation is the job's.
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kAllocationColumns +
                    ", COALESCE((SELECT MAX(dr.deployment_id) FROM deployment_replicas dr JOIN "
                    "jobs j ON j.id = dr.job_id AND j.tenant_id = dr.tenant_id WHERE "
                    "j.allocation_id = a.id AND j.tenant_id = a.tenant_id), '')"
                    " FROM allocations a WHERE a.placed_ms >= 0 AND (a.state IN ('pending', "
                    "'running', 'preempting') OR a.updated_at >= $1 OR EXISTS (SELECT 1 FROM "
                    "gpu_usage_records g WHERE g.subject_kind = 'allocation' AND g.subject_id = "
                    "a.id)) AND NOT EXISTS (SELECT 1 FROM gpu_usage_records g WHERE "
                    "g.subject_kind = 'allocation' AND g.subject_id = a.id AND g.closes_subject = "
                    "1) ORDER BY a.id",
                {changed_since_ms}));
  std::vector<AllocationToMeter> out;
  for (const auto& r : rows.rows) {
    out.push_back({AllocationFromRow(r), r.Text(kAllocationColumnCount)});
  }
  return out;
}

Result<std::vector<AllocationRecord>> Store::ListRecentAllocationsForScheduler(int64_t limit) {
  // Ids are time-ordered, so the largest are the newest.
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kAllocationColumns +
                                                   " FROM allocations ORDER BY id DESC LIMIT $1",
                                               {limit}));
  std::vector<AllocationRecord> out;
  for (auto it = rows.rows.rbegin(); it != rows.rows.rend(); ++it) {
    out.push_back(AllocationFromRow(*it));
  }
  return out;
}

namespace {

constexpr char kScrubColumns[] =
    "node, gpu, allocation_id, tenant_id, kind, model, mig_profile, mig_start, milli, "
    "gpu_memory_mib, since_ms, state, reason";

}  // namespace

Result<std::vector<GpuScrubRecord>> Store::ListGpuScrubsForScheduler() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kScrubColumns +
                                    " FROM gpu_scrubs ORDER BY node, gpu, allocation_id"));
  std::vector<GpuScrubRecord> out;
  for (const auto& r : rows.rows) {
    GpuScrubRecord g;
    g.node = r.Text(0);
    g.gpu = r.Int(1);
    g.allocation_id = r.Text(2);
    g.tenant_id = r.Text(3);
    g.kind = r.Text(4);
    g.model = r.Text(5);
    g.mig_profile = r.Text(6);
    g.mig_start = r.Int(7);
    g.milli = r.Int(8);
    g.gpu_memory_mib = r.Int(9);
    g.since_ms = r.Int(10);
    g.state = r.Text(11);
    g.reason = r.Text(12);
    out.push_back(std::move(g));
  }
  return out;
}

Status Store::CommitScheduling(const SchedulingCommit& commit) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    for (const auto& p : commit.new_projects) {
      auto inserted =
          c.Exec("INSERT INTO projects (tenant_id, name, created_at) VALUES ($1, $2, $3)",
                 {p.tenant_id, p.name, p.created_at});
      if (!inserted.has_value()) {
        Error e = std::move(inserted).error();
        if (e.code == ErrorCode::kAlreadyExists)
          e.message = "a project named '" + p.name + "' exists";
        return e;
      }
    }
    for (const auto& [tenant, name] : commit.deleted_projects) {
      ATRIUM_ASSIGN_OR_RETURN(
          auto gone,
          c.Exec("DELETE FROM projects WHERE tenant_id = $1 AND name = $2", {tenant, name}));
      if (gone.affected == 0) return Error::NotFound("project not found");
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("DELETE FROM quotas WHERE tenant_id = $1 AND project = $2", {tenant, name}));
    }
    for (const auto& q : commit.removed_quotas) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "DELETE FROM quotas WHERE tenant_id = $1 AND project = $2 AND model = $3 AND kind = $4",
          {q.tenant_id, q.project, q.model, q.kind}));
    }
    for (const auto& q : commit.quotas) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "DELETE FROM quotas WHERE tenant_id = $1 AND project = $2 AND model = $3 AND kind = $4",
          {q.tenant_id, q.project, q.model, q.kind}));
      if (q.project.empty() && q.guarantee_milli == 0 && q.limit_milli == 0) continue;
      ATRIUM_RETURN_IF_ERROR(c.Exec(std::string("INSERT INTO quotas (") + kQuotaColumns +
                                        ") VALUES ($1, $2, $3, $4, $5, $6, $7)",
                                    {q.tenant_id, q.project, q.model, q.kind, q.guarantee_milli,
                                     q.limit_milli, q.updated_at}));
    }
    for (const auto& a : commit.allocations) {
      // Only the fields the scheduler changes are updated, so who asked
      // and what was asked stay as first written.
      ATRIUM_ASSIGN_OR_RETURN(
          auto updated,
          c.Exec("UPDATE allocations SET state = $3, seq = $4, submitted_ms = $5, placed_ms = $6, "
                 "placement = $7, mig_start = $8, charge_milli = $9, preempt_at_ms = $10, "
                 "preempted_for = $11, reason = $12, ended_ms = $13, updated_at = $14, "
                 "move_requested = $15, move_requested_ms = $16 "
                 "WHERE tenant_id = $1 AND id = $2",
                 {a.tenant_id, a.id, a.state, a.seq, a.submitted_ms, a.placed_ms,
                  EncodePlacement(a.placement), a.mig_start, a.charge_milli, a.preempt_at_ms,
                  a.preempted_for, a.reason, a.ended_ms, a.updated_at, a.move_requested,
                  a.move_requested_ms}));
      if (updated.affected > 0) continue;
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          std::string("INSERT INTO allocations (") + kAllocationColumns +
              ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, "
              "$17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, "
              "$33)",
          AllocationValues(a)));
    }
    for (const auto& n : commit.node_flags) {
      ATRIUM_ASSIGN_OR_RETURN(
          auto node, c.Exec("UPDATE fleet_nodes SET cordoned = $2, draining = $3 WHERE name = $1",
                            {n.name, Flag(n.cordoned), Flag(n.draining)}));
      if (node.affected == 0) return Error::NotFound("node " + n.name + " not found");
      for (size_t i = 0; i < n.gpus.size(); ++i) {
        const auto& g = n.gpus[i];
        ATRIUM_RETURN_IF_ERROR(
            c.Exec("UPDATE fleet_gpus SET mig_enabled = $3, healthy = $4, cordoned = $5 WHERE "
                   "node = $1 AND idx = $2",
                   {n.name, static_cast<int64_t>(i), Flag(g.mig_enabled), Flag(g.healthy),
                    Flag(g.cordoned)}));
      }
    }
    auto delete_scrub = [&](const GpuScrubRecord& g) {
      return c.Exec("DELETE FROM gpu_scrubs WHERE node = $1 AND gpu = $2 AND allocation_id = $3",
                    {g.node, g.gpu, g.allocation_id});
    };
    for (const auto& g : commit.scrubs) {
      ATRIUM_RETURN_IF_ERROR(delete_scrub(g));
      ATRIUM_RETURN_IF_ERROR(
          c.Exec(std::string("INSERT INTO gpu_scrubs (") + kScrubColumns +
                     ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                 {g.node, g.gpu, g.allocation_id, g.tenant_id, g.kind, g.model, g.mig_profile,
                  g.mig_start, g.milli, g.gpu_memory_mib, g.since_ms, g.state, g.reason}));
    }
    for (const auto& g : commit.finished_scrubs) ATRIUM_RETURN_IF_ERROR(delete_scrub(g));
    for (const auto& record : commit.audit) {
      ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, record));
    }
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

}  // namespace atrium
