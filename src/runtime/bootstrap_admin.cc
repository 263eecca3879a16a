#include "runtime/bootstrap_admin.h"

#include <set>
#include <vector>

namespace atrium {
namespace {

Result<std::vector<ApiKey>> ActiveKeysOf(Store& store, const std::string& user_id, int64_t now) {
  std::vector<ApiKey> active;
  ListOptions options;
  options.limit = 500;
  while (true) {
    ATRIUM_ASSIGN_OR_RETURN(auto page,
                            store.ListApiKeys(TenantScope::Platform(), user_id, options));
    for (auto& key : page.items) {
      if (key.revoked_at == 0 && (key.expires_at == 0 || key.expires_at > now)) {
        active.push_back(std::move(key));
      }
    }
    if (page.next_cursor.empty()) return active;
    options.after = page.next_cursor;
  }
}

AuditRecord BootstrapRecord(const Clock& clock, const BootstrapAdminRequest& request,
                            const std::string& action, const std::string& target, int status) {
  AuditRecord r;
  r.time = clock.NowMillis();
  // No principal exists yet: the record names the command that acted.
  r.actor = "system:bootstrap-admin";
  r.actor_role = "platform-admin";
  r.action = action;
  r.target = target;
  r.outcome = "allowed";
  r.status = status;
  r.source = request.source;
  return r;  // tenant_id "": the platform chain
}

}  // namespace

Result<BootstrapAdminResult> BootstrapPlatformAdmin(Store& store, IdentityService& identity,
                                                    const Clock& clock,
                                                    const BootstrapAdminRequest& request) {
  BootstrapAdminResult result;
  auto existing = store.GetUserByName(TenantScope::Platform(), kBootstrapAdminName);
  std::vector<ApiKey> before;
  if (existing.has_value()) {
    ATRIUM_ASSIGN_OR_RETURN(before, ActiveKeysOf(store, existing->id, clock.NowMillis()));
    if (!before.empty() && !request.rotate) {
      return Error::AlreadyExists(
          "the bootstrap admin already has an active API key (" + before.front().id +
          "); nothing was changed. To replace it, run again with --rotate: a new key is "
          "created, the old ones are revoked, and both are recorded in the audit trail");
    }
  } else if (existing.error().code != ErrorCode::kNotFound) {
    return std::move(existing).error();
  }
  result.created_account = !existing.has_value();

  ATRIUM_ASSIGN_OR_RETURN(result.key_text, identity.BootstrapAdminKey(kBootstrapAdminName));
  ATRIUM_ASSIGN_OR_RETURN(User owner,
                          store.GetUserByName(TenantScope::Platform(), kBootstrapAdminName));
  ATRIUM_ASSIGN_OR_RETURN(auto after, ActiveKeysOf(store, owner.id, clock.NowMillis()));
  std::set<std::string> old_ids;
  for (const auto& key : before) old_ids.insert(key.id);
  for (const auto& key : after) {
    if (!old_ids.count(key.id) && result.key_text.find(key.id) != std::string::npos) {
      result.key_id = key.id;
    }
  }
  if (result.key_id.empty()) return Error::Internal("the new bootstrap key is not in the store");

  auto record = [&](const std::string& action, const std::string& target, int status) -> Status {
    ATRIUM_RETURN_IF_ERROR(
        store.AppendAudit(BootstrapRecord(clock, request, action, target, status)));
    return OkStatus();
  };
  Status recorded = OkStatus();
  if (result.created_account) recorded = record("user.create", "platform/user/" + owner.id, 201);
  if (recorded.has_value()) recorded = record("key.create", "platform/key/" + result.key_id, 201);
  if (!recorded.has_value()) {
    // An administrator key nobody can account for must not stay usable.
    (void)identity.RevokeApiKey(TenantScope::Platform(), result.key_id);
    return Error::Unavailable(
        "the new bootstrap key could not be recorded in the audit trail "
        "and was revoked: " +
        recorded.error().message);
  }
  for (const auto& key : before) {
    ATRIUM_RETURN_IF_ERROR(identity.RevokeApiKey(TenantScope::Platform(), key.id));
    ATRIUM_RETURN_IF_ERROR(record("key.revoke", "platform/key/" + key.id, 200));
    ++result.revoked_keys;
  }
  return result;
}

}  // namespace atrium
