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

#include <functional>
#include <map>
#include <mutex>
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
// tenant row is written, except TenantEvicting. The tenant service makes
// one change at a time (writes and notifications are serialized), so the
// observer sees the rows in the order they were written.
class TenantObserver {
 public:
  virtual ~TenantObserver() = default;
  // After a create (and, through the default ApplyTenantChange, an update,
  // suspension or resumption).
  virtual void TenantChanged(const Tenant& tenant) = 0;
  // Makes one change of an existing tenant row as one step with respect to
  // the observer: checks `next` (the row as it will be written) against
  // what the observer holds — an error refuses the change and `write` is
  // not called — then calls `write`, which stores the row and returns it,
  // and on success acts on the stored row as TenantChanged does. Nothing
  // the observer does for other callers may come between the check and the
  // act (the scheduler holds its lock across, so no placement slips in
  // between). Returns what `write` returned. The default checks nothing.
  virtual Result<Tenant> ApplyTenantChange(const Tenant& next,
                                           const std::function<Result<Tenant>()>& write) {
    (void)next;
    ATRIUM_ASSIGN_OR_RETURN(Tenant stored, write());
    TenantChanged(stored);
    return stored;
  }
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
  // Changes only the fields set in `changes`, over the row as it is when
  // written (a concurrent suspension is never undone). FailedPrecondition
  // when the tenant is being evicted or the observer refuses the change
  // (the scheduler: a stricter tier while the tenant's work shares GPUs or
  // nodes with other tenants', naming the allocations).
  Result<Tenant> Update(const std::string& id, const TenantChanges& changes);
  Result<Tenant> Suspend(const std::string& id);
  Result<Tenant> Resume(const std::string& id);
  Result<EvictionSummary> Evict(const std::string& id, const RequestOrigin& by = {});

 private:
  Result<Tenant> SetState(const std::string& id, const std::string& from, const std::string& to);
  // Reads the row, lets `edit` change it (an error stops), and writes it
  // over the version it read, through the observer's ApplyTenantChange;
  // reads again and redoes the edit when another writer (another server
  // on the same database) got there first. REQUIRES(write_mu_).
  Result<Tenant> EditLocked(const std::string& id,
                            const std::function<Result<bool>(Tenant&)>& edit);

  Store& store_;
  IdentityService& identity_;
  const Clock& clock_;
  TenantObserver* observer_ = nullptr;
  // Held across every write of a tenant row and its notification, so the
  // observer is told of changes in the order they were written.
  std::mutex write_mu_;
};

}  // namespace atrium
