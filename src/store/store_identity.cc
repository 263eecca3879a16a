// Store: users, API keys, login sessions and token signing keys.
#include "store/store.h"
#include "store/store_internal.h"

namespace atrium {

using sql::Row;
using sql::Value;

using namespace store_internal;  // NOLINT(google-build-using-namespace): the store's own helpers

namespace {

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

Status ExpectOneRow(const Result<sql::Rows>& r, const char* what) {
  if (!r.has_value()) return r.error();
  if (r->affected == 0) return Error::NotFound(std::string(what) + " not found");
  return OkStatus();
}

}  // namespace

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

}  // namespace atrium
