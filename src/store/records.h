// Plain records as the store keeps them. Logic about them lives in the
// subsystems (tenancy/, identity/, audit/); these are only data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace atrium {

// The tenant whose rows a store call may read or write. Every tenant-owned
// row carries tenant_id, and every store method for such rows takes a scope
// and puts it in the WHERE clause. The empty id is the platform itself (its
// own staff users and their keys) — never "all tenants".
struct TenantScope {
  std::string tenant_id;
  static TenantScope Platform() { return {""}; }
  static TenantScope Of(std::string id) { return {std::move(id)}; }
  bool is_platform() const { return tenant_id.empty(); }
};

struct Tenant {
  std::string id;
  std::string name;  // unique among live tenants; a slug
  std::string display_name;
  std::string tier;  // shared | dedicated-gpu | dedicated-node | dedicated-pool
  std::vector<std::string> regions;
  int64_t weight = 1;  // fair-share weight, 1..10000
  std::map<std::string, std::string> labels;
  std::string state;       // active | suspended | evicting
  int64_t created_at = 0;  // ms since epoch
  int64_t updated_at = 0;
};

struct User {
  std::string id;
  std::string tenant_id;  // "" for platform staff
  std::string username;   // unique within the tenant
  std::string display_name;
  std::string email;
  std::string role;           // see identity/roles.h
  std::string kind;           // human | service
  std::string password_hash;  // argon2id; empty for service accounts
  std::string state;          // active | disabled
  int64_t created_at = 0;
  int64_t updated_at = 0;
};

struct ApiKey {
  std::string id;  // key id, globally unique, part of the key text
  std::string tenant_id;
  std::string owner_user_id;
  std::string name;
  std::string role;
  std::vector<std::string> scopes;  // e.g. models the key may call; empty = all
  std::string secret_hash;          // hex SHA-256 of the secret part
  int64_t created_at = 0;
  int64_t expires_at = 0;  // 0: never
  int64_t revoked_at = 0;  // 0: not revoked
};

struct Session {
  std::string id;
  std::string tenant_id;
  std::string user_id;
  int64_t created_at = 0;
  int64_t expires_at = 0;
};

struct SigningKey {
  std::string id;      // "kid" in tokens
  std::string secret;  // hex, 32 bytes
  int64_t created_at = 0;
};

struct AuditRecord {
  int64_t seq = 0;        // global order, assigned by the store
  std::string chain;      // tenant id, or "platform"
  int64_t chain_seq = 0;  // 1, 2, ... within the chain
  int64_t time = 0;       // ms since epoch
  std::string actor;      // "user:<id>", "key:<id>", "anonymous", "system"
  std::string actor_role;
  std::string tenant_id;  // tenant acted on or acting; "" for platform
  std::string action;     // e.g. "tenant.create"
  std::string target;     // e.g. "tenant/tn_..."
  std::string outcome;    // allowed | denied | failed
  int64_t status = 0;     // HTTP status answered
  std::string request_id;
  std::string source;     // client address
  std::string prev_hash;  // hex; 64 zeros for a chain's first record
  std::string hash;       // hex SHA-256 over prev_hash and the fields above
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_cursor;  // "" when there are no more
};

struct ListOptions {
  std::string after;  // cursor from a previous page ("" = from the start)
  int limit = 100;
};

}  // namespace atrium
