// Users, service accounts, API keys, logins and the authenticator.
//
// Authenticate() turns a bearer credential into a Principal. Verified API
// keys are cached in memory so the gateway's hot path costs one SHA-256 and a
// hash-map lookup; every change that could invalidate a credential (key
// revoked, user changed or deleted, tenant suspended or evicted, logout) goes
// through this service and drops the affected cache entries before it
// returns, so revocation is effective at once. Another process sharing the
// store (a second replica, a separate gateway) sees the change when its own
// cache entry is re-read, at most kCredentialRecheckMs later.
#pragma once

#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "identity/access_token.h"
#include "identity/login_throttle.h"
#include "identity/roles.h"
#include "store/store.h"

namespace atrium {

// How long a cached key or tenant state is trusted before it is re-read, to
// bound how stale another process's view of a revocation can be.
inline constexpr int64_t kCredentialRecheckMs = 1000;

struct IdentityOptions {
  int64_t access_token_ttl_s = 3600;   // at most 1 h
  bool fast_password_hashing = false;  // tests and benchmarks only
  LoginThrottleOptions throttle;
};

struct NewUser {
  std::string username;
  std::string display_name;
  std::string email;
  std::string role;
  std::string kind = "human";  // human | service
  std::string password;        // humans only; at least 12 characters
};

struct UserChanges {
  std::optional<std::string> display_name;
  std::optional<std::string> email;
  std::optional<std::string> role;
  std::optional<std::string> state;  // active | disabled
  std::optional<std::string> password;
};

struct NewApiKey {
  std::string name;
  std::string owner_user_id;  // "" = the caller
  std::string role;           // "" = the owner's role
  std::vector<std::string> scopes;
  int64_t expires_at = 0;  // ms since epoch, 0 = never
};

struct LoginResult {
  std::string access_token;
  int64_t expires_at = 0;  // seconds
  User user;
};

class IdentityService {
 public:
  IdentityService(Store& store, const Clock& clock, IdentityOptions options = {});

  // Loads the signing keys, creating the first one if there is none.
  Status Init();

  // "Bearer" value: an API key (atr_...) or an access token.
  Result<Principal> Authenticate(const std::string& credential);

  // tenant_name "" logs in platform staff.
  Result<LoginResult> Login(const std::string& tenant_name, const std::string& username,
                            const std::string& password, const std::string& source);
  Status Logout(const Principal& p);
  // New signing key; tokens signed by older keys stay valid until they expire.
  Result<std::string> RotateSigningKey();

  // --- users ---
  Result<User> CreateUser(const Principal& actor, const TenantScope& scope, const NewUser& req);
  Result<User> UpdateUser(const Principal& actor, const TenantScope& scope, const std::string& id,
                          const UserChanges& changes);
  Status DeleteUser(const TenantScope& scope, const std::string& id);

  // --- API keys ---
  // Returns the stored record and the key text (shown once).
  Result<std::pair<ApiKey, std::string>> CreateApiKey(const Principal& actor,
                                                      const TenantScope& scope,
                                                      const NewApiKey& req);
  Status RevokeApiKey(const TenantScope& scope, const std::string& id);

  // Called by the tenancy service when a tenant's state changes or it is
  // evicted: forget every cached credential of the tenant.
  void ForgetTenant(const std::string& tenant_id);

  // Bootstrap: ensures a platform-admin service account exists and returns a
  // new API key for it (used by `atrium dev` for DIR/admin.token).
  Result<std::string> BootstrapAdminKey(const std::string& name);
  // True if `key_text` is a currently valid credential.
  bool IsValidCredential(const std::string& key_text);

 private:
  struct CachedKey {
    ApiKey key;
    Principal principal;
    int64_t loaded_at = 0;  // ms; re-read from the store after kRecheckMs
  };
  struct CachedTenantState {
    std::string state;
    int64_t loaded_at = 0;
  };
  Result<Principal> AuthenticateApiKey(const std::string& text);
  Result<Principal> AuthenticateToken(const std::string& token);
  Status CheckTenantActive(const std::string& tenant_id);
  Status ValidateNewUser(const Principal& actor, const NewUser& req);
  std::vector<SigningKey> SigningKeys();

  Store& store_;
  const Clock& clock_;
  IdentityOptions options_;
  LoginThrottle throttle_;

  std::shared_mutex mu_;
  std::vector<SigningKey> signing_keys_;                             // GUARDED_BY(mu_)
  std::unordered_map<std::string, CachedKey> key_cache_;             // GUARDED_BY(mu_)
  std::unordered_map<std::string, CachedTenantState> tenant_state_;  // GUARDED_BY(mu_)
};

}  // namespace atrium
