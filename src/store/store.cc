#include "store/store.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "audit/chain.h"
#include "common/strings.h"
#include "store/migrations.h"
#include "store/store_internal.h"

namespace atrium {
// The helpers store_internal.h declares, and the ones only this file uses.
namespace store_internal {

using sql::Row;
using sql::Value;
using Json = nlohmann::json;

std::string EncodeList(const std::vector<std::string>& v) { return Json(v).dump(); }
std::string EncodeMap(const std::map<std::string, std::string>& m) { return Json(m).dump(); }

std::vector<std::string> DecodeList(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& item : j) {
      if (item.is_string()) out.push_back(item.get<std::string>());
    }
  }
  return out;
}

std::map<std::string, std::string> DecodeMap(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::map<std::string, std::string> out;
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.value().is_string()) out[it.key()] = it.value().get<std::string>();
    }
  }
  return out;
}

Tenant TenantFromRow(const Row& r) {
  Tenant t;
  t.id = r.Text(0);
  t.name = r.Text(1);
  t.display_name = r.Text(2);
  t.tier = r.Text(3);
  t.regions = DecodeList(r.Text(4));
  t.weight = r.Int(5);
  t.labels = DecodeMap(r.Text(6));
  t.state = r.Text(7);
  t.created_at = r.Int(8);
  t.updated_at = r.Int(9);
  t.version = r.Int(10);
  return t;
}

constexpr char kUserColumns[] =
    "id, tenant_id, username, display_name, email, role, kind, password_hash, state, created_at, "
    "updated_at";

User UserFromRow(const Row& r) {
  User u;
  u.id = r.Text(0);
  u.tenant_id = r.Text(1);
  u.username = r.Text(2);
  u.display_name = r.Text(3);
  u.email = r.Text(4);
  u.role = r.Text(5);
  u.kind = r.Text(6);
  u.password_hash = r.Text(7);
  u.state = r.Text(8);
  u.created_at = r.Int(9);
  u.updated_at = r.Int(10);
  return u;
}

ApiKey KeyFromRow(const Row& r, size_t first) {
  ApiKey k;
  k.id = r.Text(first + 0);
  k.tenant_id = r.Text(first + 1);
  k.owner_user_id = r.Text(first + 2);
  k.name = r.Text(first + 3);
  k.role = r.Text(first + 4);
  k.scopes = DecodeList(r.Text(first + 5));
  k.secret_hash = r.Text(first + 6);
  k.created_at = r.Int(first + 7);
  k.expires_at = r.Int(first + 8);
  k.revoked_at = r.Int(first + 9);
  return k;
}

constexpr char kAuditColumns[] =
    "seq, chain, chain_seq, time, actor, actor_role, tenant_id, action, target, outcome, status, "
    "request_id, source, prev_hash, hash";

AuditRecord AuditFromRow(const Row& r) {
  AuditRecord a;
  a.seq = r.Int(0);
  a.chain = r.Text(1);
  a.chain_seq = r.Int(2);
  a.time = r.Int(3);
  a.actor = r.Text(4);
  a.actor_role = r.Text(5);
  a.tenant_id = r.Text(6);
  a.action = r.Text(7);
  a.target = r.Text(8);
  a.outcome = r.Text(9);
  a.status = r.Int(10);
  a.request_id = r.Text(11);
  a.source = r.Text(12);
  a.prev_hash = r.Text(13);
  a.hash = r.Text(14);
  return a;
}

Status ExpectOneRow(const Result<sql::Rows>& r, const char* what) {
  if (!r.has_value()) return r.error();
  if (r->affected == 0) return Error::NotFound(std::string(what) + " not found");
  return OkStatus();
}

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
    "created_by, updated_at, move_requested, move_requested_ms";

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
          a.move_requested_ms};
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

// Appends one audit record on an open write transaction: assigns the global
// seq and links the record into its chain. The counter row serializes
// appenders (FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already
// holds the write lock).
Result<AuditRecord> AppendAuditOn(sql::Connection& c, AuditRecord record) {
  record.chain = audit::ChainOf(record.tenant_id);
  const bool pg = c.dialect() == sql::Dialect::kPostgres;
  ATRIUM_ASSIGN_OR_RETURN(auto counter,
                          c.Exec(pg ? "SELECT last_seq FROM audit_counter WHERE id = 1 FOR UPDATE"
                                    : "SELECT last_seq FROM audit_counter WHERE id = 1",
                                 {}));
  if (counter.rows.empty()) return Error::Internal("audit counter row missing");
  record.seq = counter.rows[0].Int(0) + 1;
  ATRIUM_ASSIGN_OR_RETURN(
      auto head,
      c.Exec("SELECT chain_seq, hash FROM audit_heads WHERE chain = $1", {record.chain}));
  int64_t head_seq = head.rows.empty() ? 0 : head.rows[0].Int(0);
  std::string head_hash = head.rows.empty() ? "" : head.rows[0].Text(1);
  audit::Seal(record, head_seq, head_hash);
  const auto& r = record;
  ATRIUM_RETURN_IF_ERROR(
      c.Exec(std::string("INSERT INTO audit_log (") + kAuditColumns +
                 ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
             {r.seq, r.chain, r.chain_seq, r.time, r.actor, r.actor_role, r.tenant_id, r.action,
              r.target, r.outcome, r.status, r.request_id, r.source, r.prev_hash, r.hash}));
  ATRIUM_RETURN_IF_ERROR(c.Exec("UPDATE audit_counter SET last_seq = $1 WHERE id = 1", {r.seq}));
  if (head.rows.empty()) {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("INSERT INTO audit_heads (chain, chain_seq, hash) VALUES ($1, $2, $3)",
               {r.chain, r.chain_seq, r.hash}));
  } else {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("UPDATE audit_heads SET chain_seq = $2, hash = $3 WHERE chain = $1",
               {r.chain, r.chain_seq, r.hash}));
  }
  return record;
}

Value Flag(bool b) { return int64_t{b ? 1 : 0}; }

Status BumpGatewayPolicyMarker(sql::Connection& c) {
  ATRIUM_RETURN_IF_ERROR(
      c.Exec("UPDATE gateway_policy_version SET version = version + 1 WHERE id = 1", {}));
  return OkStatus();
}

Status ExpectOneRowOn(sql::Connection& c, std::string_view statement,
                      const std::vector<Value>& params, const char* what) {
  ATRIUM_ASSIGN_OR_RETURN(auto r, c.Exec(statement, params));
  if (r.affected == 0) return Error::NotFound(std::string(what) + " not found");
  return OkStatus();
}

Status StatusOf(Result<bool> r) {
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

}  // namespace store_internal

using namespace store_internal;  // NOLINT(google-build-using-namespace): this file's own helpers

Result<std::unique_ptr<Store>> Store::Open(const std::string& url, int pool_size) {
  ATRIUM_ASSIGN_OR_RETURN(auto db, sql::Database::Open(url, pool_size));
  ATRIUM_RETURN_IF_ERROR(ApplyMigrations(*db));
  return std::make_unique<Store>(std::move(db));
}

Store::Store(std::unique_ptr<sql::Database> db) : db_(std::move(db)) {}

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
    // The gateway's rows. Shared deployments (tenant_id "") are the
    // platform's and never match a tenant id.
    ATRIUM_ASSIGN_OR_RETURN(
        auto deployments,
        c.Exec("DELETE FROM deployments WHERE tenant_id = $1 AND tenant_id <> ''", {tenant_id}));
    s.deployments = deployments.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto entitlements,
                            c.Exec("DELETE FROM entitlements WHERE tenant_id = $1", {tenant_id}));
    s.entitlements = entitlements.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto limits,
                            c.Exec("DELETE FROM gateway_limits WHERE tenant_id = $1", {tenant_id}));
    s.gateway_limits = limits.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto tenant, c.Exec("DELETE FROM tenants WHERE id = $1", {tenant_id}));
    if (tenant.affected == 0) return Error::NotFound("tenant not found");
    // Usage records stay: they are billing records, which the operator must
    // keep (README, "Tenants"); staff read them under the tenant's id.
    ATRIUM_ASSIGN_OR_RETURN(
        auto usage, c.Exec("SELECT COUNT(*) FROM usage_records WHERE tenant_id = $1", {tenant_id}));
    s.usage_records_kept = usage.rows.at(0).Int(0);
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

// ---------------------------------------------------------------- users

Status Store::CreateUser(const User& u) {
  auto r = db_->Exec(std::string("INSERT INTO users (") + kUserColumns +
                         ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                     {u.id, u.tenant_id, u.username, u.display_name, u.email, u.role, u.kind,
                      u.password_hash, u.state, u.created_at, u.updated_at});
  if (!r.has_value()) {
    Error e = std::move(r).error();
    if (e.code == ErrorCode::kAlreadyExists) e.message = "a user named '" + u.username + "' exists";
    return e;
  }
  return OkStatus();
}

Result<User> Store::GetUser(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kUserColumns +
                                                   " FROM users WHERE tenant_id = $1 AND id = $2",
                                               {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("user not found");
  return UserFromRow(rows.rows[0]);
}

Result<User> Store::GetUserByName(const TenantScope& scope, const std::string& username) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kUserColumns +
                                        " FROM users WHERE tenant_id = $1 AND username = $2",
                                    {scope.tenant_id, username}));
  if (rows.rows.empty()) return Error::NotFound("user not found");
  return UserFromRow(rows.rows[0]);
}

Result<Page<User>> Store::ListUsers(const TenantScope& scope, const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec(std::string("SELECT ") + kUserColumns +
                               " FROM users WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3",
                           {scope.tenant_id, opts.after, int64_t{limit + 1}}));
  std::vector<User> items;
  for (const auto& r : rows.rows) items.push_back(UserFromRow(r));
  return MakePage(std::move(items), limit, [](const User& u) { return u.id; });
}

Status Store::UpdateUser(const TenantScope& scope, const User& u) {
  // The owner's role and state are part of every key row the gateway reads.
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c,
        "UPDATE users SET display_name = $3, email = $4, role = $5, password_hash = $6, "
        "state = $7, updated_at = $8 WHERE tenant_id = $1 AND id = $2",
        {scope.tenant_id, u.id, u.display_name, u.email, u.role, u.password_hash, u.state,
         u.updated_at},
        "user"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Status Store::DeleteUser(const TenantScope& scope, const std::string& id) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(auto res, c.Exec("DELETE FROM users WHERE tenant_id = $1 AND id = $2",
                                             {scope.tenant_id, id}));
    if (res.affected == 0) return Error::NotFound("user not found");
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "DELETE FROM gateway_limits WHERE tenant_id = $1 AND key_id <> '' AND key_id IN (SELECT id "
        "FROM api_keys WHERE tenant_id = $1 AND owner_user_id = $2)",
        {scope.tenant_id, id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "DELETE FROM api_keys WHERE tenant_id = $1 AND owner_user_id = $2", {scope.tenant_id, id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM sessions WHERE tenant_id = $1 AND user_id = $2",
                                  {scope.tenant_id, id}));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

// ---------------------------------------------------------------- API keys

Status Store::CreateApiKey(const ApiKey& k) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO api_keys (") + kKeyColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
               {k.id, k.tenant_id, k.owner_user_id, k.name, k.role, EncodeList(k.scopes),
                k.secret_hash, k.created_at, k.expires_at, k.revoked_at}));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Result<ApiKey> Store::GetApiKey(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kKeyColumns +
                                        " FROM api_keys WHERE tenant_id = $1 AND id = $2",
                                    {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("API key not found");
  return KeyFromRow(rows.rows[0]);
}

Result<ApiKey> Store::FindApiKeyForAuth(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kKeyColumns + " FROM api_keys WHERE id = $1", {id}));
  if (rows.rows.empty()) return Error::NotFound("API key not found");
  return KeyFromRow(rows.rows[0]);
}

Result<Page<ApiKey>> Store::ListApiKeys(const TenantScope& scope, const std::string& owner_user_id,
                                        const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  std::string q =
      std::string("SELECT ") + kKeyColumns + " FROM api_keys WHERE tenant_id = $1 AND id > $2";
  std::vector<Value> params = {scope.tenant_id, opts.after};
  if (!owner_user_id.empty()) {
    params.push_back(owner_user_id);
    q += " AND owner_user_id = $3";
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY id LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<ApiKey> items;
  for (const auto& r : rows.rows) items.push_back(KeyFromRow(r));
  return MakePage(std::move(items), limit, [](const ApiKey& k) { return k.id; });
}

Status Store::RevokeApiKey(const TenantScope& scope, const std::string& id, int64_t at) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(c,
                                          "UPDATE api_keys SET revoked_at = $3 WHERE tenant_id = "
                                          "$1 AND id = $2 AND revoked_at = 0",
                                          {scope.tenant_id, id, at}, "active API key"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

// ---------------------------------------------------------------- sessions

Status Store::CreateSession(const Session& s) {
  auto r = db_->Exec(
      "INSERT INTO sessions (id, tenant_id, user_id, created_at, expires_at) VALUES ($1, $2, $3, "
      "$4, $5)",
      {s.id, s.tenant_id, s.user_id, s.created_at, s.expires_at});
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

Result<Session> Store::FindSessionForAuth(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec("SELECT id, tenant_id, user_id, created_at, expires_at FROM sessions WHERE id = $1",
                {id}));
  if (rows.rows.empty()) return Error::NotFound("session not found");
  const auto& r = rows.rows[0];
  return Session{r.Text(0), r.Text(1), r.Text(2), r.Int(3), r.Int(4)};
}

Status Store::DeleteSession(const TenantScope& scope, const std::string& id) {
  return ExpectOneRow(
      db_->Exec("DELETE FROM sessions WHERE tenant_id = $1 AND id = $2", {scope.tenant_id, id}),
      "session");
}

Result<int64_t> Store::DeleteSessionsOfUser(const TenantScope& scope, const std::string& user_id) {
  ATRIUM_ASSIGN_OR_RETURN(auto r, db_->Exec("DELETE FROM sessions WHERE tenant_id = $1 AND "
                                            "user_id = $2",
                                            {scope.tenant_id, user_id}));
  return r.affected;
}

Result<int64_t> Store::DeleteExpiredSessionsForHousekeeping(int64_t now_ms) {
  ATRIUM_ASSIGN_OR_RETURN(auto r,
                          db_->Exec("DELETE FROM sessions WHERE expires_at <= $1", {now_ms}));
  return r.affected;
}

// ---------------------------------------------------------------- signing keys

Status Store::ReplaceSigningKeySecret(const std::string& id, const std::string& secret) {
  return ExpectOneRow(db_->Exec("UPDATE signing_keys SET secret = $1 WHERE id = $2", {secret, id}),
                      "signing key");
}

Status Store::AddSigningKey(const SigningKey& k) {
  auto r = db_->Exec("INSERT INTO signing_keys (id, secret, created_at) VALUES ($1, $2, $3)",
                     {k.id, k.secret, k.created_at});
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

Result<std::vector<SigningKey>> Store::ListSigningKeys() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(
          "SELECT id, secret, created_at FROM signing_keys ORDER BY created_at DESC, id DESC"));
  std::vector<SigningKey> keys;
  for (const auto& r : rows.rows) keys.push_back(SigningKey{r.Text(0), r.Text(1), r.Int(2)});
  return keys;
}

Status Store::DeleteSigningKey(const std::string& id) {
  return ExpectOneRow(db_->Exec("DELETE FROM signing_keys WHERE id = $1", {id}), "signing key");
}

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
      db_->Exec(
          "SELECT name, pool, rack, cpu_milli, memory_mib, gpu_model, gpu_count, "
          "nvlink_groups, idle_power_watts, cordoned, draining FROM fleet_nodes ORDER BY ord"));
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
      ATRIUM_RETURN_IF_ERROR(
          c.Exec("INSERT INTO fleet_nodes (name, ord, pool, rack, cpu_milli, memory_mib, "
                 "gpu_model, gpu_count, nvlink_groups, idle_power_watts, cordoned, draining) "
                 "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                 {n.name, ord++, n.pool, n.rack, n.cpu_milli, n.memory_mib, n.gpu_model,
                  static_cast<int64_t>(n.gpus.size()), EncodeGroups(n.nvlink_groups),
                  n.idle_power_watts, Flag(n.cordoned), Flag(n.draining)}));
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
              "$17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30)",
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
    for (const auto& record : commit.audit) {
      ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, record));
    }
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

// ---------------------------------------------------------------- audit

Result<AuditRecord> Store::AppendAudit(AuditRecord record) {
  return db_->Transact<AuditRecord>(
      [&](sql::Connection& c) -> Result<AuditRecord> { return AppendAuditOn(c, record); });
}

Result<Page<AuditRecord>> Store::ListAudit(const std::optional<std::string>& tenant_id,
                                           const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  int64_t after = opts.after.empty() ? 0 : std::strtoll(opts.after.c_str(), nullptr, 10);
  std::string q = std::string("SELECT ") + kAuditColumns + " FROM audit_log WHERE seq > $1";
  std::vector<Value> params = {after};
  if (tenant_id) {
    params.push_back(*tenant_id);
    q += " AND tenant_id = $2";
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY seq LIMIT $" + std::to_string(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<AuditRecord> items;
  for (const auto& r : rows.rows) items.push_back(AuditFromRow(r));
  return MakePage(std::move(items), limit,
                  [](const AuditRecord& a) { return std::to_string(a.seq); });
}

Result<std::vector<std::pair<std::string, std::pair<int64_t, std::string>>>> Store::AuditHeads() {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT chain, chain_seq, hash FROM audit_heads ORDER BY chain"));
  std::vector<std::pair<std::string, std::pair<int64_t, std::string>>> heads;
  for (const auto& r : rows.rows) heads.push_back({r.Text(0), {r.Int(1), r.Text(2)}});
  return heads;
}

}  // namespace atrium
