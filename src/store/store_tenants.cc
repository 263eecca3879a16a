// Store: tenants, their eviction, and the evicted tenants platform staff still read.
#include <algorithm>

#include "common/strings.h"
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

// ---------------------------------------------------------------- tenants

Status Store::CreateTenant(const Tenant& t) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO tenants (") + kTenantColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
               {t.id, t.name, t.display_name, t.tier, EncodeList(t.regions), t.weight,
                EncodeMap(t.labels), t.state, t.created_at, t.updated_at, t.version}));
    for (const auto& [k, v] : t.labels) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO tenant_labels (tenant_id, key, value) VALUES ($1, $2, $3)", {t.id, k, v}));
    }
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  });
  if (!r.has_value()) {
    Error e = std::move(r).error();
    if (e.code == ErrorCode::kAlreadyExists) e.message = "a tenant named '" + t.name + "' exists";
    return e;
  }
  return OkStatus();
}

Result<Tenant> Store::GetTenant(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kTenantColumns + " FROM tenants WHERE id = $1", {id}));
  if (rows.rows.empty()) return Error::NotFound("tenant not found");
  return TenantFromRow(rows.rows[0]);
}

Result<Tenant> Store::GetTenantByName(const std::string& name) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kTenantColumns + " FROM tenants WHERE name = $1", {name}));
  if (rows.rows.empty()) return Error::NotFound("tenant not found");
  return TenantFromRow(rows.rows[0]);
}

Result<Page<Tenant>> Store::ListTenants(const TenantFilter& filter, const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  std::string q = "SELECT ";
  std::vector<Value> params;
  for (std::string_view col : SplitString(kTenantColumns, ',')) {
    if (q.size() > 7) q += ", ";
    std::string c(col);
    c.erase(0, c.find_first_not_of(' '));
    q += "t." + c;
  }
  q += " FROM tenants t";
  if (!filter.label_key.empty()) {
    params.push_back(filter.label_key);
    params.push_back(filter.label_value);
    q += " JOIN tenant_labels l ON l.tenant_id = t.id AND l.key = $1 AND l.value = $2";
  }
  // With a label filter, page along the label index (key, value, tenant_id)
  // so the database never sorts every matching tenant to return one page.
  const std::string key_col = filter.label_key.empty() ? "t.id" : "l.tenant_id";
  params.push_back(opts.after);
  q += " WHERE " + key_col + " > $" + std::to_string(params.size());
  if (!filter.state.empty()) {
    params.push_back(filter.state);
    q += " AND t.state = $" + std::to_string(params.size());
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY " + key_col + " LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<Tenant> items;
  for (const auto& r : rows.rows) items.push_back(TenantFromRow(r));
  return MakePage(std::move(items), limit, [](const Tenant& t) { return t.id; });
}

Result<bool> Store::UpdateTenant(const Tenant& t) {
  return db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto res,
        c.Exec("UPDATE tenants SET display_name = $2, tier = $3, regions = $4, weight = $5, "
               "labels = $6, state = $7, updated_at = $8, version = version + 1 "
               "WHERE id = $1 AND version = $9",
               {t.id, t.display_name, t.tier, EncodeList(t.regions), t.weight, EncodeMap(t.labels),
                t.state, t.updated_at, t.version}));
    if (res.affected == 0) {
      ATRIUM_ASSIGN_OR_RETURN(auto exists, c.Exec("SELECT 1 FROM tenants WHERE id = $1", {t.id}));
      if (exists.rows.empty()) return Error::NotFound("tenant not found");
      return false;  // changed since t was read: nothing written
    }
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM tenant_labels WHERE tenant_id = $1", {t.id}));
    for (const auto& [k, v] : t.labels) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO tenant_labels (tenant_id, key, value) VALUES ($1, $2, $3)", {t.id, k, v}));
    }
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  });
}

Result<int64_t> Store::CountTenants() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec("SELECT COUNT(*) FROM tenants"));
  return rows.rows.at(0).Int(0);
}

Result<EvictionSummary> Store::DeleteTenantAndData(const std::string& tenant_id,
                                                   int64_t evicted_at) {
  return db_->Transact<EvictionSummary>([&](sql::Connection& c) -> Result<EvictionSummary> {
    EvictionSummary s;
    // What staff still read of the tenant once its row is gone. Written
    // before the delete, in the same transaction, so the id is never
    // unknown: usage arriving late (InsertUsageRecords) finds one or the
    // other.
    ATRIUM_ASSIGN_OR_RETURN(
        auto kept,
        c.Exec("INSERT INTO evicted_tenants (id, name, display_name, tier, created_at, evicted_at) "
               "SELECT id, name, display_name, tier, created_at, CAST($2 AS BIGINT) FROM tenants "
               "WHERE id = $1",
               {tenant_id, evicted_at}));
    if (kept.affected == 0) return Error::NotFound("tenant not found");
    ATRIUM_ASSIGN_OR_RETURN(auto keys,
                            c.Exec("DELETE FROM api_keys WHERE tenant_id = $1", {tenant_id}));
    s.api_keys = keys.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto sessions,
                            c.Exec("DELETE FROM sessions WHERE tenant_id = $1", {tenant_id}));
    s.sessions = sessions.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto users,
                            c.Exec("DELETE FROM users WHERE tenant_id = $1", {tenant_id}));
    s.users = users.affected;
    // Allocation history stays (accounting: what ran, where, how long). The
    // scheduler released what the tenant held before this; a row still held
    // (no scheduler running) is ended here, so no restart restores work of
    // a tenant that no longer exists.
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "UPDATE allocations SET state = 'released', reason = 'tenant evicted', ended_ms = $2, "
        "preempt_at_ms = -1, updated_at = $2 "
        "WHERE tenant_id = $1 AND state IN ('pending', 'running', 'preempting')",
        {tenant_id, evicted_at}));
    ATRIUM_ASSIGN_OR_RETURN(
        auto allocations,
        c.Exec("SELECT COUNT(*) FROM allocations WHERE tenant_id = $1", {tenant_id}));
    s.allocations_kept = allocations.rows.at(0).Int(0);
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM quotas WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM projects WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM tenant_labels WHERE tenant_id = $1", {tenant_id}));
    // The tenant's environment templates; the platform's (tenant_id "")
    // never match a tenant id.
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "DELETE FROM environment_templates WHERE tenant_id = $1 AND tenant_id <> ''", {tenant_id}));
    // The gateway's rows. Shared deployments (tenant_id "") are the
    // platform's and never match a tenant id.
    ATRIUM_ASSIGN_OR_RETURN(
        auto deployments,
        c.Exec("DELETE FROM deployments WHERE tenant_id = $1 AND tenant_id <> ''", {tenant_id}));
    s.deployments = deployments.affected;
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("DELETE FROM deployment_replicas WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_ASSIGN_OR_RETURN(auto entitlements,
                            c.Exec("DELETE FROM entitlements WHERE tenant_id = $1", {tenant_id}));
    s.entitlements = entitlements.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto limits,
                            c.Exec("DELETE FROM gateway_limits WHERE tenant_id = $1", {tenant_id}));
    s.gateway_limits = limits.affected;
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM job_events WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_ASSIGN_OR_RETURN(auto jobs,
                            c.Exec("DELETE FROM jobs WHERE tenant_id = $1", {tenant_id}));
    s.jobs = jobs.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto archives,
                            c.Exec("DELETE FROM job_archives WHERE tenant_id = $1", {tenant_id}));
    s.job_archives = archives.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto adapters,
                            c.Exec("DELETE FROM adapters WHERE tenant_id = $1", {tenant_id}));
    s.adapters = adapters.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto tenant, c.Exec("DELETE FROM tenants WHERE id = $1", {tenant_id}));
    if (tenant.affected == 0) return Error::NotFound("tenant not found");
    // Usage records stay: they are billing records, which the operator must
    // keep (README, "Tenants"); staff read them under the tenant's id.
    ATRIUM_ASSIGN_OR_RETURN(
        auto usage, c.Exec("SELECT COUNT(*) FROM usage_records WHERE tenant_id = $1", {tenant_id}));
    s.usage_records_kept = usage.rows.at(0).Int(0);
    // Budgets limit a tenant that is gone: they go with it, as do its
    // gateways' holds against them.
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "DELETE FROM budget_holds WHERE budget_id IN (SELECT id FROM budgets WHERE tenant_id = $1)",
        {tenant_id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budget_status WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM budgets WHERE tenant_id = $1", {tenant_id}));
    // Refusal counts are statistics, not bills: they go with the tenant.
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("DELETE FROM gateway_refusals WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return s;
  });
}

Result<Tenant> Store::GetEvictedTenantForPlatform(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec("SELECT id, name, display_name, tier, created_at, evicted_at "
                                    "FROM evicted_tenants WHERE id = $1",
                                    {id}));
  if (rows.rows.empty()) return Error::NotFound("tenant not found");
  const auto& r = rows.rows[0];
  Tenant t;
  t.id = r.Text(0);
  t.name = r.Text(1);
  t.display_name = r.Text(2);
  t.tier = r.Text(3);
  t.created_at = r.Int(4);
  t.updated_at = r.Int(5);
  t.state = "evicted";
  return t;
}

}  // namespace atrium
