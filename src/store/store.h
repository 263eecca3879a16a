// The store: every durable row of the control plane goes through here.
//
// Tenant-owned rows (users, API keys, sessions) are read and written only
// through methods that take a TenantScope; the scope's tenant id is part of
// every WHERE clause, so a handler cannot reach another tenant's row by
// passing its id. The few unscoped lookups (by API-key id, by session id)
// exist for authentication, which is how a request learns its tenant.
//
// Errors: kNotFound for a missing row (or one in another scope),
// kAlreadyExists for a taken unique name, kUnavailable when the database is
// unreachable. Thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "store/records.h"
#include "store/sql.h"

namespace atrium {

struct TenantFilter {
  std::string state;      // "" = any
  std::string label_key;  // "" = no label filter
  std::string label_value;
};

// Counts of what an eviction removed.
struct EvictionSummary {
  int64_t users = 0;
  int64_t api_keys = 0;
  int64_t sessions = 0;
  int64_t allocations = 0;  // rows, held or ended
};

class Store {
 public:
  // Opens the database at `url` (sqlite:///path or postgresql://...) and
  // applies migrations.
  static Result<std::unique_ptr<Store>> Open(const std::string& url, int pool_size = 4);

  explicit Store(std::unique_ptr<sql::Database> db);
  sql::Dialect dialect() const { return db_->dialect(); }

  // --- Tenants (rows owned by the platform) ---
  Status CreateTenant(const Tenant& t);
  Result<Tenant> GetTenant(const std::string& id);
  Result<Tenant> GetTenantByName(const std::string& name);
  Result<Page<Tenant>> ListTenants(const TenantFilter& filter, const ListOptions& opts);
  // Replaces every mutable field of the tenant with id t.id.
  Status UpdateTenant(const Tenant& t);
  Result<int64_t> CountTenants();
  // Removes the tenant row and every row it owns in one transaction. Audit
  // records are kept (they are the operator's record of what happened).
  Result<EvictionSummary> DeleteTenantAndData(const std::string& tenant_id);

  // --- Users (tenant-owned) ---
  Status CreateUser(const User& u);  // u.tenant_id must equal the scope used later
  Result<User> GetUser(const TenantScope& scope, const std::string& id);
  Result<User> GetUserByName(const TenantScope& scope, const std::string& username);
  Result<Page<User>> ListUsers(const TenantScope& scope, const ListOptions& opts);
  Status UpdateUser(const TenantScope& scope, const User& u);
  Status DeleteUser(const TenantScope& scope, const std::string& id);  // and its keys, sessions

  // --- API keys (tenant-owned) ---
  Status CreateApiKey(const ApiKey& k);
  Result<ApiKey> GetApiKey(const TenantScope& scope, const std::string& id);
  // Authentication only: the key id is globally unique.
  Result<ApiKey> FindApiKeyForAuth(const std::string& id);
  // owner_user_id "" = all keys of the tenant.
  Result<Page<ApiKey>> ListApiKeys(const TenantScope& scope, const std::string& owner_user_id,
                                   const ListOptions& opts);
  Status RevokeApiKey(const TenantScope& scope, const std::string& id, int64_t at);

  // --- Sessions (tenant-owned) ---
  Status CreateSession(const Session& s);
  Result<Session> FindSessionForAuth(const std::string& id);
  Status DeleteSession(const TenantScope& scope, const std::string& id);
  Result<int64_t> DeleteSessionsOfUser(const TenantScope& scope, const std::string& user_id);

  // --- Token signing keys (platform) ---
  Status AddSigningKey(const SigningKey& k);
  Result<std::vector<SigningKey>> ListSigningKeys();  // newest first
  Status DeleteSigningKey(const std::string& id);

  // --- GPU fleet (platform) ---
  // The stored fleet, or nullopt when none was stored yet.
  Result<std::optional<FleetRecord>> LoadFleet();
  // Replaces the whole stored fleet (sites, racks, pools, nodes, GPUs) in one
  // transaction.
  Status ReplaceFleet(const FleetRecord& fleet);

  // --- Quotas and projects (tenant-owned) ---
  // The tenant's quota rows, its own and its projects', ordered by project,
  // model, kind.
  Result<std::vector<QuotaRecord>> ListQuotas(const TenantScope& scope);
  Result<std::vector<ProjectRecord>> ListProjects(const TenantScope& scope);
  Result<ProjectRecord> GetProject(const TenantScope& scope, const std::string& name);
  // Every tenant's rows, for the scheduler's start-up (platform only).
  Result<std::vector<QuotaRecord>> ListAllQuotasForScheduler();
  Result<std::vector<ProjectRecord>> ListAllProjectsForScheduler();

  // --- Allocations (tenant-owned) ---
  Result<AllocationRecord> GetAllocation(const TenantScope& scope, const std::string& id);
  // Platform callers, who may act on any tenant's allocation: finds it by
  // its globally unique id. Never used with a tenant principal.
  Result<AllocationRecord> GetAllocationForPlatform(const std::string& id);
  // filter.tenant_id is ignored: the scope decides. Keyset-paginated by id.
  Result<Page<AllocationRecord>> ListAllocations(const TenantScope& scope,
                                                 const AllocationFilter& filter,
                                                 const ListOptions& opts);
  // Platform listing across tenants (filter.tenant_id "" = every tenant).
  Result<Page<AllocationRecord>> ListAllocationsForPlatform(const AllocationFilter& filter,
                                                            const ListOptions& opts);
  // Every held allocation (pending, running, preempting) in submission
  // order, for the scheduler's Restore at start-up.
  Result<std::vector<AllocationRecord>> ListHeldAllocationsForScheduler();
  // The newest `limit` allocations of every tenant, held or ended, oldest
  // first: the request mix the scheduler's placement policy targets.
  Result<std::vector<AllocationRecord>> ListRecentAllocationsForScheduler(int64_t limit);

  // Applies one scheduling call's changes and audit records atomically.
  Status CommitScheduling(const SchedulingCommit& commit);

  // --- Audit ---
  // Assigns seq, chain_seq, prev_hash and hash atomically and appends.
  Result<AuditRecord> AppendAudit(AuditRecord record);
  // tenant_id nullopt = every record (operators); otherwise that tenant's.
  // Cursor: records after this seq, ascending.
  Result<Page<AuditRecord>> ListAudit(const std::optional<std::string>& tenant_id,
                                      const ListOptions& opts);
  // The recorded head of every chain, to detect a truncated tail.
  Result<std::vector<std::pair<std::string, std::pair<int64_t, std::string>>>> AuditHeads();

  // Raw access for tests that must tamper with rows (the audit tamper test).
  sql::Database& database() { return *db_; }

 private:
  std::unique_ptr<sql::Database> db_;
};

}  // namespace atrium
