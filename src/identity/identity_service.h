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

#include <atomic>
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
#include "identity/password_hasher.h"
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
  // Hashes and checks passwords; null = argon2id at the cost
  // fast_password_hashing picks. Tests inject one that counts.
  std::shared_ptr<PasswordHasher> password_hasher;
  // The 32-byte key that seals token signing keys in the store
  // (identity/signing_key_box.h); the server reads it from
  // auth.signing_key_file. "" = a key random to this process: enough for
  // tests and benchmarks, but a store written with it cannot be reopened by
  // another process.
  std::string signing_key_kek;
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
  // Required with `password` when users change their own: a stolen session
  // must not become a permanent takeover.
  std::optional<std::string> current_password;
};

struct NewApiKey {
  std::string name;
  std::string owner_user_id;        // "" = the caller
  std::string role;                 // "" = the owner's role
  std::vector<std::string> scopes;  // empty = the creator's (all, for an unscoped creator)
  int64_t expires_at = 0;           // ms since epoch; 0 = the creator's expiry (never, for most)
};

struct LoginResult {
  std::string access_token;
  int64_t expires_at = 0;  // seconds
  User user;
};

class IdentityService {
 public:
  IdentityService(Store& store, const Clock& clock, IdentityOptions options = {});

  // Loads the signing keys, creating the first one if there is none, and
  // seals any a release before sealing stored in plain text. Purges expired
  // sessions.
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
  // A credential never yields one with more power than itself: a scoped or
  // expiring key cannot create a user with a password, and changing a
  // password, role or state needs a role covering the user's (see
  // UpdateUser).
  Result<User> CreateUser(const Principal& actor, const TenantScope& scope, const NewUser& req);
  // Password, role and state changes: an API key never makes them on its
  // own owner (it would outlive or outrank itself through a login); users
  // change their own password from a login session with current_password;
  // on another user the actor's role must cover the user's current role, and
  // a scoped or expiring key sets no password.
  Result<User> UpdateUser(const Principal& actor, const TenantScope& scope, const std::string& id,
                          const UserChanges& changes);
  Status DeleteUser(const TenantScope& scope, const std::string& id);

  // --- API keys ---
  // Returns the stored record and the key text (shown once). The new key is
  // never more than its creator: role covered by the creator's and the
  // owner's, scopes a subset of the creator's, expiry no later.
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
  // The stored signing keys, opened; plaintext rows are sealed on the way.
  Result<std::vector<SigningKey>> LoadSigningKeys();

  Store& store_;
  const Clock& clock_;
  IdentityOptions options_;
  LoginThrottle throttle_;
  // When a login next purges ended sessions: at most once a minute, so the
  // purge (a write on every tenant's rows) stays off most logins.
  std::atomic<int64_t> next_session_purge_ms_{0};
  std::shared_ptr<PasswordHasher> hasher_;
  // Checked instead of a real hash on every login refusal that has no hash
  // of its own, so that every refusal costs one password check.
  std::string dummy_password_hash_;

  std::shared_mutex mu_;
  std::vector<SigningKey> signing_keys_;                             // GUARDED_BY(mu_)
  std::unordered_map<std::string, CachedKey> key_cache_;             // GUARDED_BY(mu_)
  std::unordered_map<std::string, CachedTenantState> tenant_state_;  // GUARDED_BY(mu_)
};

}  // namespace atrium
