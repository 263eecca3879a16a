#include "store/store.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "audit/chain.h"
#include "common/strings.h"
#include "store/migrations.h"

namespace atrium {
namespace {

using sql::Row;
using sql::Value;
using Json = nlohmann::json;

constexpr int kMaxPageSize = 1000;

int ClampLimit(int limit) { return std::clamp(limit, 1, kMaxPageSize); }

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

constexpr char kTenantColumns[] =
    "id, name, display_name, tier, regions, weight, labels, state, created_at, updated_at";

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

constexpr char kKeyColumns[] =
    "id, tenant_id, owner_user_id, name, role, scopes, secret_hash, created_at, expires_at, "
    "revoked_at";

ApiKey KeyFromRow(const Row& r) {
  ApiKey k;
  k.id = r.Text(0);
  k.tenant_id = r.Text(1);
  k.owner_user_id = r.Text(2);
  k.name = r.Text(3);
  k.role = r.Text(4);
  k.scopes = DecodeList(r.Text(5));
  k.secret_hash = r.Text(6);
  k.created_at = r.Int(7);
  k.expires_at = r.Int(8);
  k.revoked_at = r.Int(9);
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

// Keyset pagination over rows ordered by a unique key: fetch limit+1 rows;
// if the extra one came, the page's last key is the next cursor.
template <typename T, typename KeyFn>
Page<T> MakePage(std::vector<T> items, int limit, KeyFn key) {
  Page<T> page;
  if (static_cast<int>(items.size()) > limit) {
    items.resize(limit);
    page.next_cursor = key(items.back());
  }
  page.items = std::move(items);
  return page;
}

Status ExpectOneRow(const Result<sql::Rows>& r, const char* what) {
  if (!r.has_value()) return r.error();
  if (r->affected == 0) return Error::NotFound(std::string(what) + " not found");
  return OkStatus();
}

}  // namespace

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
                   ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
               {t.id, t.name, t.display_name, t.tier, EncodeList(t.regions), t.weight,
                EncodeMap(t.labels), t.state, t.created_at, t.updated_at}));
    for (const auto& [k, v] : t.labels) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO tenant_labels (tenant_id, key, value) VALUES ($1, $2, $3)", {t.id, k, v}));
    }
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

Status Store::UpdateTenant(const Tenant& t) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(
        auto res,
        c.Exec("UPDATE tenants SET display_name = $2, tier = $3, regions = $4, weight = $5, "
               "labels = $6, state = $7, updated_at = $8 WHERE id = $1",
               {t.id, t.display_name, t.tier, EncodeList(t.regions), t.weight, EncodeMap(t.labels),
                t.state, t.updated_at}));
    if (res.affected == 0) return Error::NotFound("tenant not found");
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM tenant_labels WHERE tenant_id = $1", {t.id}));
    for (const auto& [k, v] : t.labels) {
      ATRIUM_RETURN_IF_ERROR(c.Exec(
          "INSERT INTO tenant_labels (tenant_id, key, value) VALUES ($1, $2, $3)", {t.id, k, v}));
    }
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

Result<int64_t> Store::CountTenants() {
  ATRIUM_ASSIGN_OR_RETURN(auto rows, db_->Exec("SELECT COUNT(*) FROM tenants"));
  return rows.rows.at(0).Int(0);
}

Result<EvictionSummary> Store::DeleteTenantAndData(const std::string& tenant_id) {
  return db_->Transact<EvictionSummary>([&](sql::Connection& c) -> Result<EvictionSummary> {
    EvictionSummary s;
    ATRIUM_ASSIGN_OR_RETURN(auto keys,
                            c.Exec("DELETE FROM api_keys WHERE tenant_id = $1", {tenant_id}));
    s.api_keys = keys.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto sessions,
                            c.Exec("DELETE FROM sessions WHERE tenant_id = $1", {tenant_id}));
    s.sessions = sessions.affected;
    ATRIUM_ASSIGN_OR_RETURN(auto users,
                            c.Exec("DELETE FROM users WHERE tenant_id = $1", {tenant_id}));
    s.users = users.affected;
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM tenant_labels WHERE tenant_id = $1", {tenant_id}));
    ATRIUM_ASSIGN_OR_RETURN(auto tenant, c.Exec("DELETE FROM tenants WHERE id = $1", {tenant_id}));
    if (tenant.affected == 0) return Error::NotFound("tenant not found");
    return s;
  });
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
  return ExpectOneRow(
      db_->Exec("UPDATE users SET display_name = $3, email = $4, role = $5, password_hash = $6, "
                "state = $7, updated_at = $8 WHERE tenant_id = $1 AND id = $2",
                {scope.tenant_id, u.id, u.display_name, u.email, u.role, u.password_hash, u.state,
                 u.updated_at}),
      "user");
}

Status Store::DeleteUser(const TenantScope& scope, const std::string& id) {
  auto r = db_->Transact<bool>([&](sql::Connection& c) -> Result<bool> {
    ATRIUM_ASSIGN_OR_RETURN(auto res, c.Exec("DELETE FROM users WHERE tenant_id = $1 AND id = $2",
                                             {scope.tenant_id, id}));
    if (res.affected == 0) return Error::NotFound("user not found");
    ATRIUM_RETURN_IF_ERROR(c.Exec(
        "DELETE FROM api_keys WHERE tenant_id = $1 AND owner_user_id = $2", {scope.tenant_id, id}));
    ATRIUM_RETURN_IF_ERROR(c.Exec("DELETE FROM sessions WHERE tenant_id = $1 AND user_id = $2",
                                  {scope.tenant_id, id}));
    return true;
  });
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
}

// ---------------------------------------------------------------- API keys

Status Store::CreateApiKey(const ApiKey& k) {
  auto r = db_->Exec(std::string("INSERT INTO api_keys (") + kKeyColumns +
                         ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                     {k.id, k.tenant_id, k.owner_user_id, k.name, k.role, EncodeList(k.scopes),
                      k.secret_hash, k.created_at, k.expires_at, k.revoked_at});
  if (!r.has_value()) return std::move(r).error();
  return OkStatus();
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
  return ExpectOneRow(
      db_->Exec("UPDATE api_keys SET revoked_at = $3 WHERE tenant_id = $1 AND id = $2 AND "
                "revoked_at = 0",
                {scope.tenant_id, id, at}),
      "active API key");
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

// ---------------------------------------------------------------- signing keys

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

// ---------------------------------------------------------------- audit

Result<AuditRecord> Store::AppendAudit(AuditRecord record) {
  record.chain = audit::ChainOf(record.tenant_id);
  const bool pg = db_->dialect() == sql::Dialect::kPostgres;
  return db_->Transact<AuditRecord>([&](sql::Connection& c) -> Result<AuditRecord> {
    // The counter row serializes appenders (FOR UPDATE on PostgreSQL; SQLite's
    // BEGIN IMMEDIATE already holds the write lock).
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
  });
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
