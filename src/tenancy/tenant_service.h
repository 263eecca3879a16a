// Tenants and their lifecycle: create, update, suspend, resume, evict — all
// online. Suspension and eviction go through the identity service so every
// credential of the tenant stops working before the call returns.
//
// Eviction removes the tenant's users, API keys, sessions, labels and the
// tenant row itself. What stays, by design: the audit trail (the operator's
// record of what happened, hash-chained) and — once metering exists — usage
// and billing records, which an operator must keep for accounting. A new
// tenant created later with the same name gets a new id and inherits nothing.
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

class TenantService {
 public:
  TenantService(Store& store, IdentityService& identity, const Clock& clock);

  Result<Tenant> Create(const NewTenant& req);
  Result<Tenant> Get(const std::string& id);
  Result<Page<Tenant>> List(const TenantFilter& filter, const ListOptions& opts);
  Result<Tenant> Update(const std::string& id, const TenantChanges& changes);
  Result<Tenant> Suspend(const std::string& id);
  Result<Tenant> Resume(const std::string& id);
  Result<EvictionSummary> Evict(const std::string& id);

 private:
  Result<Tenant> SetState(const std::string& id, const std::string& from, const std::string& to);

  Store& store_;
  IdentityService& identity_;
  const Clock& clock_;
};

}  // namespace atrium
