#include "tenancy/tenant_service.h"

#include "common/strings.h"
#include "crypto/ids.h"

namespace atrium {
namespace {

constexpr int64_t kMaxWeight = 10'000;
constexpr size_t kMaxLabels = 64;

Status ValidateRegions(const std::vector<std::string>& regions) {
  for (const auto& r : regions) {
    if (!IsValidSlug(r)) return Error::InvalidArgument("region '" + r + "' is not a valid name");
  }
  return OkStatus();
}

Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) return Error::InvalidArgument("at most 64 labels");
  for (const auto& [k, v] : labels) {
    if (!IsValidSlug(k)) return Error::InvalidArgument("label key '" + k + "' is not valid");
    if (v.size() > 255) return Error::InvalidArgument("label '" + k + "' value is too long");
  }
  return OkStatus();
}

Status ValidateWeight(int64_t w) {
  if (w < 1 || w > kMaxWeight) return Error::InvalidArgument("weight must be between 1 and 10000");
  return OkStatus();
}

}  // namespace

bool IsValidTier(const std::string& tier) {
  return tier == "shared" || tier == "dedicated-gpu" || tier == "dedicated-node" ||
         tier == "dedicated-pool";
}

bool IsValidTenantState(const std::string& state) {
  return state == "active" || state == "suspended" || state == "evicting";
}

TenantService::TenantService(Store& store, IdentityService& identity, const Clock& clock)
    : store_(store), identity_(identity), clock_(clock) {}

Result<Tenant> TenantService::Create(const NewTenant& req) {
  if (!IsValidSlug(req.name)) {
    return Error::InvalidArgument(
        "name must be 1-63 lower-case letters, digits, '-', '_' or '.', starting with a letter or "
        "digit");
  }
  if (req.name == "platform") return Error::InvalidArgument("the name 'platform' is reserved");
  if (!IsValidTier(req.tier)) {
    return Error::InvalidArgument(
        "tier must be one of shared, dedicated-gpu, dedicated-node, dedicated-pool");
  }
  ATRIUM_RETURN_IF_ERROR(ValidateRegions(req.regions));
  ATRIUM_RETURN_IF_ERROR(ValidateLabels(req.labels));
  ATRIUM_RETURN_IF_ERROR(ValidateWeight(req.weight));
  Tenant t;
  t.id = NewId("tn", clock_);
  t.name = req.name;
  t.display_name = req.display_name.empty() ? req.name : req.display_name;
  t.tier = req.tier;
  t.regions = req.regions;
  t.weight = req.weight;
  t.labels = req.labels;
  t.state = "active";
  t.created_at = t.updated_at = clock_.NowMillis();
  std::lock_guard<std::mutex> lock(write_mu_);
  ATRIUM_RETURN_IF_ERROR(store_.CreateTenant(t));
  if (observer_) observer_->TenantChanged(t);
  return t;
}

Result<Tenant> TenantService::Get(const std::string& id) { return store_.GetTenant(id); }

Result<Page<Tenant>> TenantService::List(const TenantFilter& filter, const ListOptions& opts) {
  if (!filter.state.empty() && !IsValidTenantState(filter.state)) {
    return Error::InvalidArgument("state must be active, suspended or evicting");
  }
  return store_.ListTenants(filter, opts);
}

Result<Tenant> TenantService::EditLocked(const std::string& id,
                                         const std::function<Result<bool>(Tenant&)>& edit) {
  // Within this process write_mu_ already orders writers; another server
  // writing the same row makes the compare-and-set fail, and the change is
  // redone on the fresh row a bounded number of times.
  constexpr int kAttempts = 8;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, store_.GetTenant(id));
    ATRIUM_ASSIGN_OR_RETURN(bool changed, edit(t));
    if (!changed) return t;
    t.updated_at = clock_.NowMillis();
    bool stale = false;
    auto write = [&]() -> Result<Tenant> {
      ATRIUM_ASSIGN_OR_RETURN(bool written, store_.UpdateTenant(t));
      if (!written) {
        stale = true;
        return Error::Unavailable("tenant " + id + " changed while it was being updated");
      }
      Tenant stored = t;
      ++stored.version;
      return stored;
    };
    Result<Tenant> result = observer_ ? observer_->ApplyTenantChange(t, write) : write();
    if (result.has_value() || !stale) return result;
  }
  return Error::Unavailable("tenant " + id + " kept changing while it was being updated; retry");
}

Result<Tenant> TenantService::Update(const std::string& id, const TenantChanges& changes) {
  if (changes.display_name && changes.display_name->empty()) {
    return Error::InvalidArgument("display_name is empty");
  }
  if (changes.tier && !IsValidTier(*changes.tier)) return Error::InvalidArgument("unknown tier");
  if (changes.regions) ATRIUM_RETURN_IF_ERROR(ValidateRegions(*changes.regions));
  if (changes.weight) ATRIUM_RETURN_IF_ERROR(ValidateWeight(*changes.weight));
  if (changes.labels) ATRIUM_RETURN_IF_ERROR(ValidateLabels(*changes.labels));
  std::lock_guard<std::mutex> lock(write_mu_);
  return EditLocked(id, [&](Tenant& t) -> Result<bool> {
    if (t.state == "evicting") return Error::FailedPrecondition("tenant is being evicted");
    // Only the fields asked for change; state and the rest stay as read
    // (and the write is over exactly that version).
    if (changes.display_name) t.display_name = *changes.display_name;
    if (changes.tier) t.tier = *changes.tier;
    if (changes.regions) t.regions = *changes.regions;
    if (changes.weight) t.weight = *changes.weight;
    if (changes.labels) t.labels = *changes.labels;
    return true;
  });
}

Result<Tenant> TenantService::SetState(const std::string& id, const std::string& from,
                                       const std::string& to) {
  std::lock_guard<std::mutex> lock(write_mu_);
  ATRIUM_ASSIGN_OR_RETURN(
      Tenant t, EditLocked(id, [&](Tenant& t) -> Result<bool> {
        if (t.state == to) return false;  // idempotent
        if (t.state != from) {
          return Error::FailedPrecondition("tenant is " + t.state + ", not " + from);
        }
        t.state = to;
        return true;
      }));
  identity_.ForgetTenant(id);
  return t;
}

Result<Tenant> TenantService::Suspend(const std::string& id) {
  return SetState(id, "active", "suspended");
}

Result<Tenant> TenantService::Resume(const std::string& id) {
  return SetState(id, "suspended", "active");
}

Result<EvictionSummary> TenantService::Evict(const std::string& id, const RequestOrigin& by) {
  std::lock_guard<std::mutex> lock(write_mu_);
  // First make every credential fail (durably, so a crash mid-way leaves the
  // tenant locked out), then remove the data in one transaction. The state
  // is written over the version read, like every change, so a concurrent
  // update cannot undo it; the scheduler is told by TenantEvicting, not as
  // a tenant change.
  for (int attempt = 0;; ++attempt) {
    ATRIUM_ASSIGN_OR_RETURN(Tenant t, store_.GetTenant(id));
    if (t.state == "evicting") break;
    t.state = "evicting";
    t.updated_at = clock_.NowMillis();
    ATRIUM_ASSIGN_OR_RETURN(bool written, store_.UpdateTenant(t));
    if (written) break;
    if (attempt == 8) {
      return Error::Unavailable("tenant " + id + " kept changing while it was being evicted");
    }
  }
  identity_.ForgetTenant(id);
  // Then release what it holds (the scheduler records and audits each
  // release), and only then delete its rows.
  if (observer_) ATRIUM_RETURN_IF_ERROR(observer_->TenantEvicting(id, by));
  auto summary = store_.DeleteTenantAndData(id, clock_.NowMillis());
  identity_.ForgetTenant(id);
  return summary;
}

}  // namespace atrium
