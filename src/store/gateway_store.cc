// The store's rows behind the inference gateway: model deployments,
// entitlements, gateway limits, usage records, and the gateway's unscoped
// policy read with its change marker. See store.h for the contracts.
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {
namespace {

using sql::Row;
using sql::Value;
using store_internal::AppendAuditOn;
using store_internal::BumpGatewayPolicyMarker;
using store_internal::ClampLimit;
using store_internal::ExpectOneRowOn;
using store_internal::Flag;
using store_internal::kUsageColumns;
using store_internal::MakePage;
using store_internal::NewestFirstPage;
using store_internal::StatusOf;
using store_internal::UsageFromRow;
using Json = nlohmann::json;

std::string P(size_t n) { return "$" + std::to_string(n); }

// --- deployments

std::string EncodeEndpoints(const std::vector<DeploymentEndpoint>& endpoints) {
  Json j = Json::array();
  for (const auto& e : endpoints) {
    Json item = {{"url", e.url}, {"capacity", e.capacity}};
    if (e.max_prefill > 0) item["max_prefill"] = e.max_prefill;
    if (e.burst > 0) item["burst"] = e.burst;
    j.push_back(std::move(item));
  }
  return j.dump();
}

std::vector<DeploymentEndpoint> DecodeEndpoints(const std::string& text) {
  Json j = Json::parse(text, nullptr, false);
  std::vector<DeploymentEndpoint> out;
  if (!j.is_array()) return out;
  for (const auto& item : j) {
    if (!item.is_object()) continue;
    DeploymentEndpoint e;
    if (item.contains("url") && item["url"].is_string()) e.url = item["url"].get<std::string>();
    if (item.contains("capacity") && item["capacity"].is_number_integer()) {
      e.capacity = item["capacity"].get<int64_t>();
    }
    if (item.contains("max_prefill") && item["max_prefill"].is_number_integer()) {
      e.max_prefill = item["max_prefill"].get<int64_t>();
    }
    if (item.contains("burst") && item["burst"].is_number_integer()) {
      e.burst = item["burst"].get<int64_t>();
    }
    out.push_back(std::move(e));
  }
  return out;
}

constexpr char kDeploymentColumns[] =
    "id, model, version, endpoints, region, latency_tier, visibility, tenant_id, created_at, "
    "updated_at, serving";

// The same columns qualified with the alias "d", for queries that join.
constexpr char kDeploymentColumnsD[] =
    "d.id, d.model, d.version, d.endpoints, d.region, d.latency_tier, d.visibility, d.tenant_id, "
    "d.created_at, d.updated_at, d.serving";

DeploymentRecord DeploymentFromRow(const Row& r) {
  DeploymentRecord d;
  d.id = r.Text(0);
  d.model = r.Text(1);
  d.version = r.Text(2);
  d.endpoints = DecodeEndpoints(r.Text(3));
  d.region = r.Text(4);
  d.latency_tier = r.Text(5);
  d.visibility = r.Text(6);
  d.tenant_id = r.Text(7);
  d.created_at = r.Int(8);
  d.updated_at = r.Int(9);
  d.serving = r.Text(10);
  return d;
}

constexpr char kReplicaColumns[] =
    "id, deployment_id, tenant_id, job_id, port, url, state, generation, health_failures, "
    "reason, created_at, ready_at, drain_started_at, ended_at, updated_at, spec";

DeploymentReplicaRecord ReplicaFromRow(const Row& r) {
  DeploymentReplicaRecord x;
  x.id = r.Text(0);
  x.deployment_id = r.Text(1);
  x.tenant_id = r.Text(2);
  x.job_id = r.Text(3);
  x.port = r.Int(4);
  x.url = r.Text(5);
  x.state = r.Text(6);
  x.generation = r.Int(7);
  x.health_failures = r.Int(8);
  x.reason = r.Text(9);
  x.created_at = r.Int(10);
  x.ready_at = r.Int(11);
  x.drain_started_at = r.Int(12);
  x.ended_at = r.Int(13);
  x.updated_at = r.Int(14);
  x.spec = r.Text(15);
  return x;
}

std::vector<Value> ReplicaValues(const DeploymentReplicaRecord& x) {
  return {x.id,         x.deployment_id, x.tenant_id,        x.job_id,          x.port,
          x.url,        x.state,         x.generation,       x.health_failures, x.reason,
          x.created_at, x.ready_at,      x.drain_started_at, x.ended_at,        x.updated_at,
          x.spec};
}

// What `tenant_param` (a placeholder holding the scope's tenant id) may use:
// its own dedicated deployments, and shared ones of models it is entitled
// to. For the platform scope ("") only shared deployments match: no
// entitlement row has tenant "".
std::string VisibleTo(const std::string& tenant_param) {
  return "(d.tenant_id = " + tenant_param +
         " OR (d.tenant_id = '' AND EXISTS (SELECT 1 FROM entitlements e WHERE e.tenant_id = " +
         tenant_param + " AND e.model = d.model)))";
}

Result<Page<DeploymentRecord>> ListDeploymentsWhere(sql::Database& db, const std::string& where,
                                                    std::vector<Value> params,
                                                    const DeploymentFilter& filter,
                                                    const ListOptions& opts) {
  int limit = ClampLimit(opts.limit);
  std::string q = std::string("SELECT ") + kDeploymentColumnsD + " FROM deployments d WHERE " +
                  where + (where.empty() ? "" : " AND ");
  params.push_back(opts.after);
  q += "d.id > " + P(params.size());
  if (!filter.model.empty()) {
    params.push_back(filter.model);
    q += " AND d.model = " + P(params.size());
  }
  params.push_back(int64_t{limit + 1});
  q += " ORDER BY d.id LIMIT " + P(params.size());
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db.Exec(q, params));
  std::vector<DeploymentRecord> items;
  for (const auto& r : rows.rows) items.push_back(DeploymentFromRow(r));
  return MakePage(std::move(items), limit, [](const DeploymentRecord& d) { return d.id; });
}

// --- limits

constexpr char kLimitColumns[] =
    "tenant_id, key_id, requests_per_minute, tokens_per_minute, max_concurrent, max_queued, "
    "priority, updated_at";

GatewayLimitRecord LimitFromRow(const Row& r) {
  GatewayLimitRecord l;
  l.tenant_id = r.Text(0);
  l.key_id = r.Text(1);
  l.limits.requests_per_minute = r.Int(2);
  l.limits.tokens_per_minute = r.Int(3);
  l.limits.max_concurrent = r.Int(4);
  l.limits.max_queued = r.Int(5);
  l.priority = r.Text(6);
  l.updated_at = r.Int(7);
  return l;
}

bool IsEmpty(const GatewayLimitRecord& r) {
  const GatewayLimits& l = r.limits;
  return l.requests_per_minute == 0 && l.tokens_per_minute == 0 && l.max_concurrent == 0 &&
         l.max_queued == 0 && r.priority.empty();
}

// --- usage

constexpr size_t kUsageColumnCount = 18;
// Rows per INSERT: 18 parameters each stays under SQLite's oldest limit of
// 999 parameters per statement.
constexpr size_t kUsageRowsPerInsert = 50;

// Rows in the next INSERT with `left` rows to go: full statements of
// kUsageRowsPerInsert, the rest in powers of two. A batch of any size then
// uses at most seven distinct statements, which the connection prepares once
// and keeps (SQLite's parse of an 850-parameter statement costs more than
// inserting its rows).
size_t RowsInNextUsageInsert(size_t left) {
  if (left >= kUsageRowsPerInsert) return kUsageRowsPerInsert;
  size_t rows = 1;
  while (rows * 2 <= left) rows *= 2;
  return rows;
}

// The INSERT of `rows` usage records, written once per row count. The
// idempotency: a record already stored (a re-shipped batch, or the same id
// twice in one) is skipped, in both dialects.
const std::string& UsageInsertSql(size_t rows) {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> out(kUsageRowsPerInsert + 1);
    for (size_t n = 1; n <= kUsageRowsPerInsert; ++n) {
      std::string q = std::string("INSERT INTO usage_records (") + kUsageColumns + ") VALUES ";
      size_t param = 0;
      for (size_t row = 0; row < n; ++row) {
        q += row ? ", (" : "(";
        for (size_t col = 0; col < kUsageColumnCount; ++col) {
          if (col) q += ", ";
          q += P(++param);
        }
        q += ")";
      }
      q += " ON CONFLICT (id) DO NOTHING";
      out[n] = std::move(q);
    }
    return out;
  }();
  return texts.at(rows);
}

// A token count as stored: 0..kMaxRecordTokens, so that sums of fewer than
// 2^31 records fit an int64 in SQLite's SUM (which fails on overflow),
// PostgreSQL's and the reader's.
int64_t StoredTokens(int64_t n) { return std::clamp<int64_t>(n, 0, kMaxRecordTokens); }

// The record's text is referenced, not copied: `u` outlives the insert.
void AppendUsageValues(const UsageRecord& u, std::vector<Value>& out) {
  using sql::TextRef;
  out.insert(
      out.end(),
      {TextRef{u.id}, TextRef{u.tenant_id}, TextRef{u.key_id}, TextRef{u.model},
       TextRef{u.deployment_id}, TextRef{u.endpoint}, TextRef{u.api}, Flag(u.stream),
       StoredTokens(u.input_tokens), StoredTokens(u.output_tokens), StoredTokens(u.cached_tokens),
       u.queue_ms, u.ttft_ms, u.total_ms, TextRef{u.status}, int64_t{u.http_status}, u.created_at,
       // A count cut to the bound is flagged like an implausible report.
       TextRef{StoredTokens(u.input_tokens) != u.input_tokens ||
                       StoredTokens(u.output_tokens) != u.output_tokens ||
                       StoredTokens(u.cached_tokens) != u.cached_tokens
                   ? std::string_view(kUsageOverBound)
                   : std::string_view(u.flag)}});
}

// WHERE clause of a usage query over one tenant and a filter; params get
// the values in placeholder order.
// `time_column` holds the time `filter.from`/`to` bound: created_at for
// usage records, minute_at for refusal counts.
std::string UsageWhere(const TenantScope& scope, const UsageFilter& filter,
                       std::vector<Value>& params, std::string_view time_column = "created_at") {
  params.push_back(scope.tenant_id);
  std::string where = "tenant_id = " + P(params.size());
  if (filter.from != 0) {
    params.push_back(filter.from);
    where += " AND " + std::string(time_column) + " >= " + P(params.size());
  }
  if (filter.to != 0) {
    params.push_back(filter.to);
    where += " AND " + std::string(time_column) + " < " + P(params.size());
  }
  if (!filter.model.empty()) {
    params.push_back(filter.model);
    where += " AND model = " + P(params.size());
  }
  if (!filter.key_id.empty()) {
    params.push_back(filter.key_id);
    where += " AND key_id = " + P(params.size());
  }
  if (!filter.deployment_id.empty()) {
    params.push_back(filter.deployment_id);
    where += " AND deployment_id = " + P(params.size());
  }
  return where;
}

// Text the store can hold: valid UTF-8 without NUL (PostgreSQL's text
// refuses both; SQLite is held to the same so that the two agree).
bool StorableText(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

// Why `u` can never be stored; "" when it can.
// A record as AppendUsageValues stores it: counts cut to the bound, and
// then flagged.
UsageRecord AsStored(UsageRecord u) {
  const bool cut = StoredTokens(u.input_tokens) != u.input_tokens ||
                   StoredTokens(u.output_tokens) != u.output_tokens ||
                   StoredTokens(u.cached_tokens) != u.cached_tokens;
  u.input_tokens = StoredTokens(u.input_tokens);
  u.output_tokens = StoredTokens(u.output_tokens);
  u.cached_tokens = StoredTokens(u.cached_tokens);
  if (cut) u.flag = kUsageOverBound;
  return u;
}

bool SamePayload(const UsageRecord& stored, const UsageRecord& offered) {
  const UsageRecord b = AsStored(offered);
  const UsageRecord& a = stored;
  return a.id == b.id && a.tenant_id == b.tenant_id && a.key_id == b.key_id && a.model == b.model &&
         a.deployment_id == b.deployment_id && a.endpoint == b.endpoint && a.api == b.api &&
         a.stream == b.stream && a.input_tokens == b.input_tokens &&
         a.output_tokens == b.output_tokens && a.cached_tokens == b.cached_tokens &&
         a.queue_ms == b.queue_ms && a.ttft_ms == b.ttft_ms && a.total_ms == b.total_ms &&
         a.status == b.status && a.http_status == b.http_status && a.created_at == b.created_at &&
         a.flag == b.flag;
}

// The idempotency rule: a record stored already is skipped only when it is
// the same record (a re-ship); the same id with another payload is refused
// whole, naming the record, so nothing is merged or silently dropped.
Status RefuseChangedRecordsOn(sql::Connection& c, const std::vector<const UsageRecord*>& records) {
  std::map<std::string, const UsageRecord*> by_id;
  for (const UsageRecord* u : records) {
    auto [it, fresh] = by_id.emplace(u->id, u);
    if (!fresh && !SamePayload(AsStored(*it->second), *u)) {
      return Error{ErrorCode::kAlreadyExists,
                   "usage record " + u->id + " comes twice with different payloads: refused"};
    }
  }
  std::vector<std::string> ids;
  ids.reserve(by_id.size());
  for (const auto& [id, u] : by_id) ids.push_back(id);
  for (size_t start = 0; start < ids.size(); start += store_internal::kInListChunk) {
    const size_t end = std::min(ids.size(), start + store_internal::kInListChunk);
    std::vector<Value> params;
    const std::string in = store_internal::AppendInList(ids, start, end, params);
    ATRIUM_ASSIGN_OR_RETURN(auto rows,
                            c.Exec(std::string("SELECT ") + store_internal::kUsageColumns +
                                       " FROM usage_records WHERE id IN (" + in + ")",
                                   params));
    for (const auto& r : rows.rows) {
      UsageRecord stored = UsageFromRow(r);
      const UsageRecord& offered = *by_id.at(stored.id);
      if (!SamePayload(stored, offered)) {
        return Error{ErrorCode::kAlreadyExists,
                     "usage record " + stored.id +
                         " is stored already with a different payload: refused, not merged"};
      }
    }
  }
  return OkStatus();
}

std::string UsageRecordDefect(const UsageRecord& u) {
  if (u.id.empty()) return "usage record without id";
  if (u.tenant_id.empty()) return "usage record has no tenant";
  const std::pair<const char*, const std::string*> texts[] = {{"id", &u.id},
                                                              {"tenant_id", &u.tenant_id},
                                                              {"key_id", &u.key_id},
                                                              {"model", &u.model},
                                                              {"deployment_id", &u.deployment_id},
                                                              {"endpoint", &u.endpoint},
                                                              {"api", &u.api},
                                                              {"status", &u.status}};
  for (const auto& [name, text] : texts) {
    if (!StorableText(*text)) {
      return std::string("usage record's ") + name + " is not UTF-8 text without NUL bytes";
    }
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------- deployments

Status Store::CreateDeployment(const DeploymentRecord& d) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        c.Exec(std::string("INSERT INTO deployments (") + kDeploymentColumns +
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
               {d.id, d.model, d.version, EncodeEndpoints(d.endpoints), d.region, d.latency_tier,
                d.visibility, d.tenant_id, d.created_at, d.updated_at, d.serving}));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  });
  if (!r.has_value()) {
    Error e = std::move(r).error();
    if (e.code == ErrorCode::kAlreadyExists)
      e.message = "a deployment with id '" + d.id + "' exists";
    return e;
  }
  return OkStatus();
}

Result<DeploymentRecord> Store::GetDeployment(const TenantScope& scope, const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec(std::string("SELECT ") + kDeploymentColumnsD +
                               " FROM deployments d WHERE d.id = $2 AND " + VisibleTo("$1"),
                           {scope.tenant_id, id}));
  if (rows.rows.empty()) return Error::NotFound("deployment not found");
  return DeploymentFromRow(rows.rows[0]);
}

Result<DeploymentRecord> Store::GetDeploymentForPlatform(const std::string& id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kDeploymentColumns +
                                                   " FROM deployments WHERE id = $1",
                                               {id}));
  if (rows.rows.empty()) return Error::NotFound("deployment not found");
  return DeploymentFromRow(rows.rows[0]);
}

Result<Page<DeploymentRecord>> Store::ListDeployments(const TenantScope& scope,
                                                      const DeploymentFilter& filter,
                                                      const ListOptions& opts) {
  return ListDeploymentsWhere(*db_, VisibleTo("$1"), {scope.tenant_id}, filter, opts);
}

Result<Page<DeploymentRecord>> Store::ListDeploymentsForPlatform(const DeploymentFilter& filter,
                                                                 const ListOptions& opts) {
  return ListDeploymentsWhere(*db_, "", {}, filter, opts);
}

Status Store::UpdateDeployment(const TenantScope& scope, const DeploymentRecord& d) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c,
        // A managed deployment's endpoints are the serving controller's
        // (SetManagedEndpoints), never what the caller read before.
        "UPDATE deployments SET model = $3, version = $4, "
        "endpoints = CASE WHEN serving = '' THEN $5 ELSE endpoints END, region = $6, "
        "latency_tier = $7, updated_at = $8, serving = $9 WHERE tenant_id = $1 AND id = $2",
        {scope.tenant_id, d.id, d.model, d.version, EncodeEndpoints(d.endpoints), d.region,
         d.latency_tier, d.updated_at, d.serving},
        "deployment"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Status Store::DeleteDeployment(const TenantScope& scope, const std::string& id) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        ExpectOneRowOn(c, "DELETE FROM deployments WHERE tenant_id = $1 AND id = $2",
                       {scope.tenant_id, id}, "deployment"));
    // Every tenant's adapters on it (their files go with its replicas).
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM adapters WHERE deployment_id = $1", {id}));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Result<std::vector<DeploymentRecord>> Store::ListManagedDeploymentsForServing() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kDeploymentColumns +
                                        " FROM deployments WHERE serving <> '' ORDER BY id",
                                    {}));
  std::vector<DeploymentRecord> out;
  for (const auto& r : rows.rows) out.push_back(DeploymentFromRow(r));
  return out;
}

Status Store::SetManagedEndpoints(const std::string& id,
                                  const std::vector<DeploymentEndpoint>& endpoints, int64_t at) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c, "UPDATE deployments SET endpoints = $2, updated_at = $3 WHERE id = $1 AND serving <> ''",
        {id, EncodeEndpoints(endpoints), at}, "managed deployment"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Status Store::ReplaceServing(const std::string& id, const std::string& expected,
                             const std::string& next, int64_t at, const AuditRecord& audit) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto done,
        c.Exec(
            "UPDATE deployments SET serving = $3, updated_at = $4 WHERE id = $1 AND serving = $2 "
            "AND serving <> ''",
            {id, expected, next, at}));
    if (done.affected != 1) {
      return Error::FailedPrecondition("deployment " + id +
                                       ": its serving spec changed meanwhile or it is gone");
    }
    ATRIUM_RETURN_IF_ERROR(AppendAuditOn(c, audit));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Status Store::CreateReplica(const DeploymentReplicaRecord& r) {
  ATRIUM_RETURN_IF_ERROR(db_->Exec(std::string("INSERT INTO deployment_replicas (") +
                                       kReplicaColumns +
                                       ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, "
                                       "$12, $13, $14, $15, $16)",
                                   ReplicaValues(r)));
  return OkStatus();
}

Status Store::UpdateReplica(const DeploymentReplicaRecord& r) {
  std::vector<Value> values = ReplicaValues(r);
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(ExpectOneRowOn(
        c,
        "UPDATE deployment_replicas SET deployment_id = $2, tenant_id = $3, job_id = $4, "
        "port = $5, url = $6, state = $7, generation = $8, health_failures = $9, reason = $10, "
        "created_at = $11, ready_at = $12, drain_started_at = $13, ended_at = $14, "
        "updated_at = $15, spec = $16 WHERE id = $1",
        values, "replica"));
    return true;
  }));
}

Result<std::vector<DeploymentReplicaRecord>> Store::ListLiveReplicasForServing() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kReplicaColumns +
                                                   " FROM deployment_replicas WHERE state <> "
                                                   "'ended' ORDER BY id",
                                               {}));
  std::vector<DeploymentReplicaRecord> out;
  for (const auto& r : rows.rows) out.push_back(ReplicaFromRow(r));
  return out;
}

Result<std::vector<DeploymentReplicaRecord>> Store::ListReplicas(const std::string& deployment_id,
                                                                 int limit) {
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows,
      db_->Exec(std::string("SELECT ") + kReplicaColumns +
                    " FROM deployment_replicas WHERE deployment_id = $1 ORDER BY "
                    "CASE WHEN state = 'ended' THEN 1 ELSE 0 END, created_at DESC, id DESC "
                    "LIMIT $2",
                {deployment_id, int64_t{limit}}));
  std::vector<DeploymentReplicaRecord> out;
  for (const auto& r : rows.rows) out.push_back(ReplicaFromRow(r));
  return out;
}

Status Store::DeleteEndedReplicas(int64_t ended_before_ms) {
  ATRIUM_RETURN_IF_ERROR(
      db_->Exec("DELETE FROM deployment_replicas WHERE state = 'ended' AND ended_at < $1",
                {ended_before_ms}));
  return OkStatus();
}

// ---------------------------------------------------------------- deployment load

Status Store::ReportDeploymentLoad(const std::vector<DeploymentLoadReport>& reports,
                                   int64_t forget_before_ms) {
  if (reports.size() > kMaxLoadReports) {
    return Error::InvalidArgument("at most " + std::to_string(kMaxLoadReports) +
                                  " load reports at once");
  }
  for (const auto& r : reports) {
    const bool counts_ok = r.queued >= 0 && r.queued <= kMaxLoadCount && r.in_flight >= 0 &&
                           r.in_flight <= kMaxLoadCount && r.oldest_wait_ms >= 0 &&
                           r.oldest_wait_ms <= kMaxLoadCount;
    if (r.deployment_id.empty() || r.gateway_id.empty() || !counts_ok) {
      return Error::InvalidArgument(
          "a load report needs a deployment, a gateway and counts within 0.." +
          std::to_string(kMaxLoadCount));
    }
  }
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    for (const auto& r : reports) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO deployment_load (deployment_id, gateway_id, queued, oldest_wait_ms, "
          "in_flight, reported_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (deployment_id, "
          "gateway_id) DO UPDATE SET queued = excluded.queued, oldest_wait_ms = "
          "excluded.oldest_wait_ms, in_flight = excluded.in_flight, reported_at = "
          "excluded.reported_at",
          {r.deployment_id, r.gateway_id, r.queued, r.oldest_wait_ms, r.in_flight, r.reported_at}));
    }
    ATRIUM_RETURN_IF_ERROR(
        c.Exec("DELETE FROM deployment_load WHERE reported_at < $1", {forget_before_ms}));
    return true;
  }));
}

Result<DeploymentLoadTotals> Store::DeploymentLoadForServing(const std::string& deployment_id,
                                                             int64_t since_ms) {
  // Each count is at most kMaxLoadCount: the sums fit an int64.
  ATRIUM_ASSIGN_OR_RETURN(
      auto rows, db_->Exec("SELECT COUNT(*), SUM(queued), MAX(oldest_wait_ms), SUM(in_flight) "
                           "FROM deployment_load WHERE deployment_id = $1 AND reported_at >= $2",
                           {deployment_id, since_ms}));
  DeploymentLoadTotals t;
  if (rows.rows.empty()) return t;
  const auto& r = rows.rows[0];
  // Over no rows the SUMs and MAX are NULL, which read as 0.
  t.gateways = r.Int(0);
  t.queued = r.Int(1);
  t.oldest_wait_ms = r.Int(2);
  t.in_flight = r.Int(3);
  return t;
}

// ---------------------------------------------------------------- entitlements

Result<EntitlementRecord> Store::GrantEntitlement(const TenantScope& scope,
                                                  const std::string& model, int64_t at) {
  return db_->Transact<EntitlementRecord>([&](sql::Connection& c) -> Result<EntitlementRecord> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto inserted,
        c.Exec("INSERT INTO entitlements (tenant_id, model, created_at) VALUES ($1, $2, $3) "
               "ON CONFLICT (tenant_id, model) DO NOTHING",
               {scope.tenant_id, model, at}));
    if (inserted.affected > 0) ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    ATRIUM_ASSIGN_OR_RETURN(auto rows,
                            c.Exec("SELECT tenant_id, model, created_at FROM entitlements WHERE "
                                   "tenant_id = $1 AND model = $2",
                                   {scope.tenant_id, model}));
    if (rows.rows.empty()) return Error::Internal("entitlement vanished after its insert");
    const auto& r = rows.rows[0];
    return EntitlementRecord{r.Text(0), r.Text(1), r.Int(2)};
  });
}

Status Store::RevokeEntitlement(const TenantScope& scope, const std::string& model) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_RETURN_IF_ERROR(
        ExpectOneRowOn(c, "DELETE FROM entitlements WHERE tenant_id = $1 AND model = $2",
                       {scope.tenant_id, model}, "entitlement"));
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Result<std::vector<EntitlementRecord>> Store::ListEntitlements(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec("SELECT tenant_id, model, created_at FROM entitlements WHERE "
                                    "tenant_id = $1 ORDER BY model",
                                    {scope.tenant_id}));
  std::vector<EntitlementRecord> out;
  for (const auto& r : rows.rows) out.push_back({r.Text(0), r.Text(1), r.Int(2)});
  return out;
}

// ---------------------------------------------------------------- gateway limits

Status Store::SetGatewayLimit(const TenantScope& scope, const GatewayLimitRecord& r) {
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    if (!r.key_id.empty()) {
      ATRIUM_ASSIGN_OR_RETURN(auto key, c.Exec("SELECT 1 FROM api_keys WHERE tenant_id = $1 AND "
                                               "id = $2",
                                               {scope.tenant_id, r.key_id}));
      if (key.rows.empty()) return Error::NotFound("API key not found");
    }
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM gateway_limits WHERE tenant_id = $1 AND key_id = $2",
                                  {scope.tenant_id, r.key_id}));
    if (!IsEmpty(r)) {
      const GatewayLimits& l = r.limits;
      ATRIUM_RETURN_IF_ERROR(
          c.Exec(std::string("INSERT INTO gateway_limits (") + kLimitColumns +
                     ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                 {scope.tenant_id, r.key_id, l.requests_per_minute, l.tokens_per_minute,
                  l.max_concurrent, l.max_queued, r.priority, r.updated_at}));
    }
    ATRIUM_RETURN_IF_ERROR(BumpGatewayPolicyMarker(c));
    return true;
  }));
}

Result<GatewayLimitRecord> Store::GetGatewayLimit(const TenantScope& scope,
                                                  const std::string& key_id) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec(std::string("SELECT ") + kLimitColumns +
                                        " FROM gateway_limits WHERE tenant_id = $1 AND key_id = $2",
                                    {scope.tenant_id, key_id}));
  if (rows.rows.empty()) return Error::NotFound("gateway limit not found");
  return LimitFromRow(rows.rows[0]);
}

Result<std::vector<GatewayLimitRecord>> Store::ListGatewayLimits(const TenantScope& scope) {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(std::string("SELECT ") + kLimitColumns +
                                                   " FROM gateway_limits WHERE tenant_id = $1 "
                                                   "ORDER BY key_id",
                                               {scope.tenant_id}));
  std::vector<GatewayLimitRecord> out;
  for (const auto& r : rows.rows) out.push_back(LimitFromRow(r));
  return out;
}

// ---------------------------------------------------------------- usage

Status Store::InsertUsageRecords(const std::vector<UsageRecord>& records,
                                 const std::optional<UsageWindow>& window) {
  if (records.empty()) return OkStatus();
  for (const auto& u : records) {
    if (window.has_value() && (u.created_at < window->now_ms - window->back_ms ||
                               u.created_at > window->now_ms + window->ahead_ms)) {
      return Error::InvalidArgument(
          "usage record " + (StorableText(u.id) ? u.id : std::string("?")) + " is timed " +
          std::to_string(u.created_at) +
          ", outside the window billing takes: " + std::to_string(window->back_ms / 86'400'000) +
          " days back to " + std::to_string(window->ahead_ms / 60'000) + " minutes ahead of now (" +
          std::to_string(window->now_ms) + ")");
    }
    // Checked before anything is stored: the batch is refused whole, and the
    // gateway's shipper then finds and sets aside the defective record.
    if (std::string defect = UsageRecordDefect(u); !defect.empty()) {
      // The id is quoted only when it is itself printable text.
      const bool printable_id =
          StorableText(u.id) && std::none_of(u.id.begin(), u.id.end(), [](char c) {
            return static_cast<unsigned char>(c) < 0x20;
          });
      return Error::InvalidArgument(defect + (printable_id ? " (id " + u.id + ")" : ""));
    }
  }
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    // Which tenants exist or were evicted: an evicted tenant's usage is kept
    // (billing records outlive the tenant), even when it arrives after the
    // eviction. On PostgreSQL the share lock makes an eviction that runs at
    // the same time wait for this batch, or, if it came first, leaves its
    // evicted_tenants row (same transaction) for the second look to find.
    const bool pg = c.dialect() == sql::Dialect::kPostgres;
    std::set<std::string> tenants;
    for (const auto& u : records) tenants.insert(u.tenant_id);
    std::set<std::string> live;
    for (const auto& t : tenants) {
      ATRIUM_ASSIGN_OR_RETURN(auto rows,
                              c.Exec(pg ? "SELECT id FROM tenants WHERE id = $1 FOR SHARE"
                                        : "SELECT id FROM tenants WHERE id = $1",
                                     {t}));
      if (!rows.rows.empty()) {
        live.insert(t);
        continue;
      }
      ATRIUM_ASSIGN_OR_RETURN(auto evicted,
                              c.Exec("SELECT id FROM evicted_tenants WHERE id = $1", {t}));
      if (!evicted.rows.empty()) live.insert(t);
    }
    std::vector<const UsageRecord*> kept;
    for (const auto& u : records) {
      if (live.count(u.tenant_id)) kept.push_back(&u);
    }
    ATRIUM_RETURN_IF_ERROR(RefuseChangedRecordsOn(c, kept));
    for (size_t start = 0, end = 0; start < kept.size(); start = end) {
      end = start + RowsInNextUsageInsert(kept.size() - start);
      std::vector<Value> params;
      params.reserve((end - start) * kUsageColumnCount);
      for (size_t i = start; i < end; ++i) AppendUsageValues(*kept[i], params);
      ATRIUM_RETURN_IF_ERROR(c.Exec(UsageInsertSql(end - start), params));
    }
    return true;
  }));
}

Result<Page<UsageRecord>> Store::ListUsage(const TenantScope& scope, const UsageFilter& filter,
                                           const ListOptions& opts) {
  std::vector<Value> params;
  std::string q = std::string("SELECT ") + kUsageColumns + " FROM usage_records WHERE " +
                  UsageWhere(scope, filter, params);
  return NewestFirstPage(*db_, std::move(q), std::move(params), "created_at",
                         &UsageRecord::created_at, opts, "usage", UsageFromRow);
}

Result<std::vector<UsageTotals>> Store::SummarizeUsage(const TenantScope& scope,
                                                       const UsageFilter& filter,
                                                       const std::string& group_by) {
  std::string column;
  if (group_by == "model") {
    column = "model";
  } else if (group_by == "key") {
    column = "key_id";
  } else if (group_by == "deployment") {
    column = "deployment_id";
  } else if (!group_by.empty()) {
    return Error::InvalidArgument("group_by must be model, key or deployment");
  }
  std::vector<Value> params;
  std::string where = UsageWhere(scope, filter, params);
  // Every stored count is at most kMaxRecordTokens (written so, and
  // migration 4 brought older rows under it): these SUMs fit an int64 for
  // fewer than 2^31 records, which SQLite needs (its SUM fails on overflow).
  std::string q = "SELECT " + (column.empty() ? std::string("''") : column) +
                  ", COUNT(*), SUM(input_tokens), SUM(output_tokens), SUM(cached_tokens) FROM "
                  "usage_records WHERE " +
                  where;
  if (!column.empty()) q += " GROUP BY " + column + " ORDER BY " + column;
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<UsageTotals> out;
  for (const auto& r : rows.rows) {
    // SUM over no rows is NULL, which reads as 0.
    out.push_back({r.Text(0), r.Int(1), r.Int(2), r.Int(3), r.Int(4)});
  }
  return out;
}

// ---------------------------------------------------------------- refusals

Status Store::AddGatewayRefusals(const std::vector<RefusalCount>& counts) {
  if (counts.empty()) return OkStatus();
  for (const auto& r : counts) {
    if (r.tenant_id.empty() || r.reason.empty() || r.count <= 0) {
      return Error::InvalidArgument("refusal count needs a tenant, a reason and a positive count");
    }
  }
  return StatusOf(db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    // As for usage records: counts of a tenant evicted meanwhile are dropped.
    const bool pg = c.dialect() == sql::Dialect::kPostgres;
    std::map<std::string, bool> live;
    for (const auto& r : counts) {
      auto [it, fresh] = live.emplace(r.tenant_id, false);
      if (!fresh) continue;
      ATRIUM_ASSIGN_OR_RETURN(auto rows,
                              c.Exec(pg ? "SELECT id FROM tenants WHERE id = $1 FOR SHARE"
                                        : "SELECT id FROM tenants WHERE id = $1",
                                     {r.tenant_id}));
      it->second = !rows.rows.empty();
    }
    for (const auto& r : counts) {
      if (!live[r.tenant_id]) continue;
      // A minute's count stops at kMaxRecordTokens (70 million refusals a
      // second would reach it), so that SUMs over rows cannot overflow.
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO gateway_refusals (tenant_id, key_id, reason, minute_at, requests) "
          "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, minute_at, key_id, reason) "
          "DO UPDATE SET requests = CASE WHEN gateway_refusals.requests > $6 - excluded.requests "
          "THEN $6 ELSE gateway_refusals.requests + excluded.requests END",
          {r.tenant_id, r.key_id, r.reason, r.minute_at,
           std::min<int64_t>(r.count, kMaxRecordTokens), kMaxRecordTokens}));
    }
    return true;
  }));
}

Result<std::vector<RefusalTotals>> Store::SummarizeGatewayRefusals(const TenantScope& scope,
                                                                   const UsageFilter& filter) {
  if (!filter.model.empty()) return Error::InvalidArgument("refusals are not counted per model");
  std::vector<Value> params;
  const std::string q =
      "SELECT key_id, reason, SUM(requests), MIN(minute_at), MAX(minute_at) FROM gateway_refusals "
      "WHERE " +
      UsageWhere(scope, filter, params, "minute_at") +
      " GROUP BY key_id, reason ORDER BY key_id, reason";
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec(q, params));
  std::vector<RefusalTotals> out;
  for (const auto& r : rows.rows)
    out.push_back({r.Text(0), r.Text(1), r.Int(2), r.Int(3), r.Int(4)});
  return out;
}

// ---------------------------------------------------------------- the gateway's view

Result<GatewayPolicyRows> Store::LoadGatewayPolicyForGateway() {
  sql::Database::Lease conn = db_->Acquire();
  // One read-only snapshot: on PostgreSQL a repeatable-read transaction; on
  // SQLite a deferred one, whose first read fixes the snapshot (WAL mode).
  const bool pg = conn->dialect() == sql::Dialect::kPostgres;
  ATRIUM_RETURN_IF_ERROR(
      conn->Exec(pg ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN", {}));
  auto load = [&]() -> Result<GatewayPolicyRows> {
    GatewayPolicyRows out;
    ATRIUM_ASSIGN_OR_RETURN(
        auto marker, conn->Exec("SELECT version FROM gateway_policy_version WHERE id = 1", {}));
    if (marker.rows.empty()) return Error::Internal("gateway policy marker row missing");
    out.marker = marker.rows[0].Int(0);

    ATRIUM_ASSIGN_OR_RETURN(auto tenants,
                            conn->Exec(std::string("SELECT ") + store_internal::kTenantColumns +
                                           " FROM tenants ORDER BY id",
                                       {}));
    out.tenants.reserve(tenants.rows.size());
    for (const auto& r : tenants.rows) out.tenants.push_back(store_internal::TenantFromRow(r));

    // Keys with their owner in one join; the owner's columns come first.
    std::string key_columns;
    for (std::string_view col : {"id", "tenant_id", "owner_user_id", "name", "role", "scopes",
                                 "secret_hash", "created_at", "expires_at", "revoked_at"}) {
      key_columns += std::string(key_columns.empty() ? "" : ", ") + "k." + std::string(col);
    }
    ATRIUM_ASSIGN_OR_RETURN(
        auto keys, conn->Exec("SELECT u.state, u.role, " + key_columns +
                                  " FROM api_keys k JOIN users u ON u.tenant_id = k.tenant_id AND "
                                  "u.id = k.owner_user_id WHERE k.revoked_at = 0 AND "
                                  "k.tenant_id <> '' ORDER BY k.id",
                              {}));
    out.keys.reserve(keys.rows.size());
    for (const auto& r : keys.rows) {
      GatewayKeyRow row;
      row.owner_state = r.Text(0);
      row.owner_role = r.Text(1);
      row.key = store_internal::KeyFromRow(r, 2);
      out.keys.push_back(std::move(row));
    }

    ATRIUM_ASSIGN_OR_RETURN(
        auto deployments,
        conn->Exec(std::string("SELECT ") + kDeploymentColumns + " FROM deployments ORDER BY id",
                   {}));
    out.deployments.reserve(deployments.rows.size());
    for (const auto& r : deployments.rows) out.deployments.push_back(DeploymentFromRow(r));

    ATRIUM_ASSIGN_OR_RETURN(
        auto entitlements,
        conn->Exec(
            "SELECT tenant_id, model, created_at FROM entitlements ORDER BY tenant_id, model", {}));
    out.entitlements.reserve(entitlements.rows.size());
    for (const auto& r : entitlements.rows) {
      out.entitlements.push_back({r.Text(0), r.Text(1), r.Int(2)});
    }

    ATRIUM_ASSIGN_OR_RETURN(auto limits,
                            conn->Exec(std::string("SELECT ") + kLimitColumns +
                                           " FROM gateway_limits ORDER BY tenant_id, key_id",
                                       {}));
    out.limits.reserve(limits.rows.size());
    for (const auto& r : limits.rows) out.limits.push_back(LimitFromRow(r));

    ATRIUM_ASSIGN_OR_RETURN(out.adapters, store_internal::ReadyAdaptersOn(*conn));
    return out;
  };
  Result<GatewayPolicyRows> loaded = load();
  // Read-only: ending it either way changes nothing.
  auto ended = conn->Exec(loaded.has_value() ? "COMMIT" : "ROLLBACK", {});
  if (loaded.has_value() && !ended.has_value()) return std::move(ended).error();
  return loaded;
}

Result<int64_t> Store::GatewayPolicyMarkerForGateway() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows,
                          db_->Exec("SELECT version FROM gateway_policy_version WHERE id = 1"));
  if (rows.rows.empty()) return Error::Internal("gateway policy marker row missing");
  return rows.rows[0].Int(0);
}

namespace store_internal {

UsageRecord UsageFromRow(const sql::Row& r) {
  UsageRecord u;
  u.id = r.Text(0);
  u.tenant_id = r.Text(1);
  u.key_id = r.Text(2);
  u.model = r.Text(3);
  u.deployment_id = r.Text(4);
  u.endpoint = r.Text(5);
  u.api = r.Text(6);
  u.stream = r.Int(7) != 0;
  u.input_tokens = r.Int(8);
  u.output_tokens = r.Int(9);
  u.cached_tokens = r.Int(10);
  u.queue_ms = r.Int(11);
  u.ttft_ms = r.Int(12);
  u.total_ms = r.Int(13);
  u.status = r.Text(14);
  u.http_status = static_cast<int>(r.Int(15));
  u.created_at = r.Int(16);
  u.flag = r.Text(17);
  return u;
}

}  // namespace store_internal

}  // namespace atrium
