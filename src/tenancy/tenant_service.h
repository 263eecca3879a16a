// Tenants and their lifecycle: create, update, suspend, resume, evict — all
// online. Suspension and eviction go through the identity service so every
// credential of the tenant stops working before the call returns.
//
// Eviction removes the tenant's users, API keys, sessions, labels, quotas,
// projects, gateway rows and the tenant row itself. What stays, by design:
// the audit trail (the operator's record of what happened, hash-chained),
// usage records (also those the gateway ships after the eviction) and
// allocation history, which an operator must keep for accounting; platform
// staff read them under the evicted tenant's id (the tenant reads as state
// "evicted"). A new tenant created later with the same name gets a new id
// and inherits nothing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "identity/identity_service.h"
#include "store/store.h"

namespace atrium {

// Validated values of the tenant vocabulary.
bool IsValidTier(const std::string& tier);
bool IsValidTenantState(const std::string& state);

struct NewTenant {
  std::string name;
  std::string display_name;
  std::string tier = "shared";
  std::vector<std::string> regions;
  int64_t weight = 1;
  std::map<std::string, std::string> labels;
};

struct TenantChanges {
  std::optional<std::string> display_name;
  std::optional<std::string> tier;
  std::optional<std::vector<std::string>> regions;
  std::optional<int64_t> weight;
  std::optional<std::map<std::string, std::string>> labels;
};

// Told about tenant lifecycle changes, so other services (the scheduler)
// act on them at once. Called on the thread that made the change, after the
// tenant row is written, except TenantEvicting.
class TenantObserver {
 public:
  virtual ~TenantObserver() = default;
  // After a create, update, suspension or resumption.
  virtual void TenantChanged(const Tenant& tenant) = 0;
  // During eviction, after every credential of the tenant stopped working
  // and before its rows are deleted: release what the tenant holds. An
  // error stops the eviction (the tenant stays "evicting"; evicting again
  // retries). `by` is who evicts, for the audit records this causes.
  virtual Status TenantEvicting(const std::string& tenant_id, const RequestOrigin& by) = 0;
};

class TenantService {
 public:
  TenantService(Store& store, IdentityService& identity, const Clock& clock);

  // At most one observer; nullptr removes it. Not thread-safe: set it
  // before serving requests. The observer must outlive this service or be
  // removed first.
  void SetObserver(TenantObserver* observer) { observer_ = observer; }

  Result<Tenant> Create(const NewTenant& req);
  Result<Tenant> Get(const std::string& id);
  Result<Page<Tenant>> List(const TenantFilter& filter, const ListOptions& opts);
  Result<Tenant> Update(const std::string& id, const TenantChanges& changes);
  Result<Tenant> Suspend(const std::string& id);
  Result<Tenant> Resume(const std::string& id);
  Result<EvictionSummary> Evict(const std::string& id, const RequestOrigin& by = {});

 private:
  Result<Tenant> SetState(const std::string& id, const std::string& from, const std::string& to);

  Store& store_;
  IdentityService& identity_;
  const Clock& clock_;
  TenantObserver* observer_ = nullptr;
};

}  // namespace atrium
