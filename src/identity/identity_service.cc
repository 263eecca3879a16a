#include "identity/identity_service.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "common/strings.h"
#include "crypto/crypto.h"
#include "crypto/ids.h"
#include "identity/api_key.h"
#include "identity/signing_key_box.h"

namespace atrium {
namespace {

constexpr size_t kMinPasswordLength = 12;
constexpr size_t kMaxPasswordLength = 1024;
// Keep retired signing keys this long after a newer key took over, so that
// every token they signed has expired first.
constexpr int64_t kSigningKeyGraceMs = int64_t{2} * 3600 * 1000;

Status ValidatePassword(const std::string& pw) {
  if (pw.size() < kMinPasswordLength) {
    return Error::InvalidArgument("password must have at least 12 characters");
  }
  if (pw.size() > kMaxPasswordLength) return Error::InvalidArgument("password is too long");
  return OkStatus();
}

// The key-encryption key of a service given none (see IdentityOptions).
const std::string& ProcessSigningKeyKek() {
  static const std::string kek = crypto::RandomBytes(crypto::kSecretBoxKeyBytes);
  return kek;
}

}  // namespace

IdentityService::IdentityService(Store& store, const Clock& clock, IdentityOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      throttle_(clock, options_.throttle) {
  options_.access_token_ttl_s = std::clamp<int64_t>(options_.access_token_ttl_s, 60, 3600);
  if (options_.signing_key_kek.empty()) options_.signing_key_kek = ProcessSigningKeyKek();
  hasher_ = options_.password_hasher ? options_.password_hasher
                                     : NewArgon2PasswordHasher(options_.fast_password_hashing);
  // Hashed with the same hasher and cost as real passwords, so checking it
  // costs what checking a real one does.
  auto dummy = hasher_->Hash(crypto::HexEncode(crypto::RandomBytes(16)));
  if (dummy.has_value()) dummy_password_hash_ = std::move(dummy).value();
}

Status IdentityService::Init() {
  if (options_.signing_key_kek.size() != crypto::kSecretBoxKeyBytes) {
    return Error::InvalidArgument("the signing-key encryption key must have 32 bytes");
  }
  ATRIUM_ASSIGN_OR_RETURN(auto keys, LoadSigningKeys());
  ATRIUM_RETURN_IF_ERROR(store_.DeleteExpiredSessionsForHousekeeping(clock_.NowMillis()));
  if (keys.empty()) {
    ATRIUM_RETURN_IF_ERROR(RotateSigningKey());
    return OkStatus();
  }
  std::unique_lock lock(mu_);
  signing_keys_ = std::move(keys);
  return OkStatus();
}

Result<std::vector<SigningKey>> IdentityService::LoadSigningKeys() {
  ATRIUM_ASSIGN_OR_RETURN(auto keys, store_.ListSigningKeys());
  for (SigningKey& key : keys) {
    if (!IsSealedSecret(key.secret)) {
      // Written by a release that kept signing keys in plain text: seal it
      // in place. Tokens it signed stay valid; the plaintext is gone from
      // the live database (not from older backups of it).
      ATRIUM_ASSIGN_OR_RETURN(std::string sealed, SealSecret(options_.signing_key_kek, key.secret));
      ATRIUM_RETURN_IF_ERROR(store_.ReplaceSigningKeySecret(key.id, sealed));
      continue;
    }
    ATRIUM_ASSIGN_OR_RETURN(key.secret, OpenSealedSecret(options_.signing_key_kek, key.secret));
  }
  return keys;
}

std::vector<SigningKey> IdentityService::SigningKeys() {
  std::shared_lock lock(mu_);
  return signing_keys_;
}

Result<std::string> IdentityService::RotateSigningKey() {
  // created_at orders the keyset (newest signs), so it must strictly grow
  // even when two rotations land in the same millisecond.
  int64_t created_at = clock_.NowMillis();
  {
    std::shared_lock lock(mu_);
    if (!signing_keys_.empty()) {
      created_at = std::max(created_at, signing_keys_.front().created_at + 1);
    }
  }
  SigningKey key{NewId("sk", clock_), crypto::HexEncode(crypto::RandomBytes(32)), created_at};
  ATRIUM_ASSIGN_OR_RETURN(std::string sealed, SealSecret(options_.signing_key_kek, key.secret));
  ATRIUM_RETURN_IF_ERROR(store_.AddSigningKey(SigningKey{key.id, sealed, key.created_at}));
  ATRIUM_ASSIGN_OR_RETURN(auto keys, LoadSigningKeys());
  // Drop keys superseded long enough ago that nothing they signed is valid.
  std::vector<SigningKey> kept;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool superseded_long_ago =
        i > 0 && keys[i - 1].created_at + kSigningKeyGraceMs < clock_.NowMillis();
    if (superseded_long_ago) {
      ATRIUM_RETURN_IF_ERROR(store_.DeleteSigningKey(keys[i].id));
    } else {
      kept.push_back(keys[i]);
    }
  }
  std::unique_lock lock(mu_);
  signing_keys_ = std::move(kept);
  return key.id;
}

Status IdentityService::CheckTenantActive(const std::string& tenant_id) {
  if (tenant_id.empty()) return OkStatus();
  {
    std::shared_lock lock(mu_);
    auto it = tenant_state_.find(tenant_id);
    if (it != tenant_state_.end() &&
        clock_.NowMillis() - it->second.loaded_at < kCredentialRecheckMs) {
      if (it->second.state == "active") return OkStatus();
      return Error::Unauthenticated("tenant is " + it->second.state);
    }
  }
  auto tenant = store_.GetTenant(tenant_id);
  if (!tenant.has_value()) {
    if (tenant.error().code == ErrorCode::kNotFound) {
      return Error::Unauthenticated("credential belongs to no tenant");
    }
    return tenant.error();
  }
  std::unique_lock lock(mu_);
  tenant_state_[tenant_id] = CachedTenantState{tenant->state, clock_.NowMillis()};
  if (tenant->state != "active") return Error::Unauthenticated("tenant is " + tenant->state);
  return OkStatus();
}

Result<Principal> IdentityService::Authenticate(const std::string& credential) {
  if (credential.empty()) return Error::Unauthenticated("missing credential");
  if (StartsWith(credential, kApiKeyPrefix)) return AuthenticateApiKey(credential);
  return AuthenticateToken(credential);
}

Result<Principal> IdentityService::AuthenticateApiKey(const std::string& text) {
  ATRIUM_ASSIGN_OR_RETURN(ParsedApiKey parsed, ParseApiKey(text));
  std::string presented_hash = HashApiKeySecret(parsed.secret);
  std::optional<CachedKey> cached;
  {
    std::shared_lock lock(mu_);
    auto it = key_cache_.find(parsed.key_id);
    if (it != key_cache_.end() &&
        clock_.NowMillis() - it->second.loaded_at < kCredentialRecheckMs) {
      cached = it->second;
    }
  }
  if (!cached) {
    auto key = store_.FindApiKeyForAuth(parsed.key_id);
    if (!key.has_value()) {
      if (key.error().code == ErrorCode::kNotFound)
        return Error::Unauthenticated("invalid API key");
      return key.error();
    }
    auto owner = store_.GetUser(TenantScope::Of(key->tenant_id), key->owner_user_id);
    if (!owner.has_value()) return Error::Unauthenticated("invalid API key");
    if (owner->state != "active") return Error::Unauthenticated("the key's owner is disabled");
    auto role = ParseRole(key->role);
    auto owner_role = ParseRole(owner->role);
    if (!role || !owner_role) return Error::Unauthenticated("invalid API key");
    // A key never outranks its owner as the owner is now: demoting a user
    // demotes what their keys can do.
    if (!RoleCovers(*owner_role, *role)) {
      return Error::Unauthenticated("the key's role exceeds its owner's current role");
    }
    Principal p;
    p.tenant_id = key->tenant_id;
    p.user_id = key->owner_user_id;
    p.role = *role;
    p.credential = "key:" + key->id;
    p.is_service = owner->kind == "service";
    p.scopes = key->scopes;
    p.expires_at = key->expires_at;
    cached = CachedKey{*key, p, clock_.NowMillis()};
    // Only unrevoked keys are cached; revocation erases the entry.
    if (key->revoked_at == 0) {
      std::unique_lock lock(mu_);
      key_cache_[parsed.key_id] = *cached;
    }
  }
  if (!crypto::ConstantTimeEquals(cached->key.secret_hash, presented_hash)) {
    return Error::Unauthenticated("invalid API key");
  }
  if (cached->key.revoked_at != 0) return Error::Unauthenticated("API key revoked");
  if (cached->key.expires_at != 0 && clock_.NowMillis() >= cached->key.expires_at) {
    return Error::Unauthenticated("API key expired");
  }
  ATRIUM_RETURN_IF_ERROR(CheckTenantActive(cached->key.tenant_id));
  return cached->principal;
}

Result<Principal> IdentityService::AuthenticateToken(const std::string& token) {
  ATRIUM_ASSIGN_OR_RETURN(TokenClaims claims,
                          VerifyAccessToken(token, SigningKeys(), clock_.NowSeconds()));
  // The session row makes logout and eviction effective before expiry.
  auto session = store_.FindSessionForAuth(claims.session_id);
  if (!session.has_value()) {
    if (session.error().code == ErrorCode::kNotFound)
      return Error::Unauthenticated("session ended");
    return session.error();
  }
  if (session->user_id != claims.subject || session->tenant_id != claims.tenant_id) {
    return Error::Unauthenticated("invalid access token");
  }
  // The row's expiry rules, not only the token's: a session ends when the
  // server says so.
  if (clock_.NowMillis() >= session->expires_at) return Error::Unauthenticated("session ended");
  auto user = store_.GetUser(TenantScope::Of(claims.tenant_id), claims.subject);
  if (!user.has_value() || user->state != "active") {
    return Error::Unauthenticated("user is disabled or gone");
  }
  auto role = ParseRole(user->role);  // the current role, not the one at login
  if (!role) return Error::Unauthenticated("invalid access token");
  ATRIUM_RETURN_IF_ERROR(CheckTenantActive(claims.tenant_id));
  Principal p;
  p.tenant_id = claims.tenant_id;
  p.user_id = claims.subject;
  p.role = *role;
  p.credential = "session:" + claims.session_id;
  return p;
}

Result<LoginResult> IdentityService::Login(const std::string& tenant_name,
                                           const std::string& username, const std::string& password,
                                           const std::string& source) {
  std::string account = tenant_name + "/" + username;
  ATRIUM_RETURN_IF_ERROR(throttle_.Check(account, source));
  const auto reject = [&]() -> Error {
    throttle_.RecordFailure(account, source);
    return Error::Unauthenticated("wrong tenant, username or password");
  };
  // Every refusal below costs exactly one password check (a real hash or
  // the dummy one), so how long a refusal takes does not tell a missing
  // tenant, a suspended one, a service account or an unknown name from a
  // wrong password.
  bool refused = false;
  TenantScope scope = TenantScope::Platform();
  if (!tenant_name.empty()) {
    auto tenant = store_.GetTenantByName(tenant_name);
    if (!tenant.has_value()) {
      if (tenant.error().code != ErrorCode::kNotFound) return tenant.error();
      refused = true;
    } else {
      refused = tenant->state != "active";
      scope = TenantScope::Of(tenant->id);
    }
  }
  std::optional<User> user;
  if (!refused) {
    auto found = store_.GetUserByName(scope, username);
    if (found.has_value()) {
      user = std::move(found).value();
    } else if (found.error().code != ErrorCode::kNotFound) {
      return found.error();
    }
  }
  const bool has_password = user && user->kind == "human" && !user->password_hash.empty();
  const bool password_ok =
      hasher_->Verify(has_password ? user->password_hash : dummy_password_hash_, password);
  if (!has_password || !password_ok || refused || user->state != "active") return reject();
  throttle_.RecordSuccess(account);
  // Logins are when sessions are made, so also when the ended ones go (at
  // most once a minute). A failed purge only leaves rows that no longer
  // authenticate anyway.
  if (const int64_t now = clock_.NowMillis(); now >= next_session_purge_ms_.load()) {
    next_session_purge_ms_.store(now + 60'000);
    (void)store_.DeleteExpiredSessionsForHousekeeping(now);
  }
  int64_t now_s = clock_.NowSeconds();
  Session session{NewId("ses", clock_), user->tenant_id, user->id, clock_.NowMillis(),
                  (now_s + options_.access_token_ttl_s) * 1000};
  ATRIUM_RETURN_IF_ERROR(store_.CreateSession(session));
  TokenClaims claims{user->id,   user->tenant_id, user->role,
                     session.id, now_s,           now_s + options_.access_token_ttl_s};
  ATRIUM_ASSIGN_OR_RETURN(std::string token, SignAccessToken(claims, SigningKeys()));
  return LoginResult{token, claims.expires_at, *user};
}

Status IdentityService::Logout(const Principal& p) {
  if (!StartsWith(p.credential, "session:")) {
    return Error::InvalidArgument("logout ends a login session; revoke an API key instead");
  }
  return store_.DeleteSession(TenantScope::Of(p.tenant_id),
                              p.credential.substr(std::string_view("session:").size()));
}

Status IdentityService::ValidateNewUser(const Principal& actor, const NewUser& req) {
  if (!IsValidSlug(req.username)) {
    return Error::InvalidArgument(
        "username must be 1-63 lower-case letters, digits, '-', '_' or '.'");
  }
  if (req.kind != "human" && req.kind != "service") {
    return Error::InvalidArgument("kind must be 'human' or 'service'");
  }
  if (req.kind == "human") {
    ATRIUM_RETURN_IF_ERROR(ValidatePassword(req.password));
  } else if (!req.password.empty()) {
    return Error::InvalidArgument("service accounts have no password; give them API keys");
  }
  return OkStatus();
}

Result<User> IdentityService::CreateUser(const Principal& actor, const TenantScope& scope,
                                         const NewUser& req) {
  ATRIUM_RETURN_IF_ERROR(ValidateNewUser(actor, req));
  auto role = ParseRole(req.role);
  if (!role) return Error::InvalidArgument("unknown role '" + req.role + "'");
  if (IsPlatformRole(*role) != scope.is_platform()) {
    return Error::InvalidArgument(scope.is_platform() ? "platform users take a platform role"
                                                      : "tenant users take a tenant role");
  }
  if (!RoleCovers(actor.role, *role)) {
    return Error::PermissionDenied("cannot grant a role above your own");
  }
  if (req.kind == "human" && actor.is_restricted_key()) {
    return Error::PermissionDenied(
        "a scoped or expiring key cannot create a user with a password: the login would outlive "
        "or outreach it");
  }
  User u;
  u.id = NewId("usr", clock_);
  u.tenant_id = scope.tenant_id;
  u.username = req.username;
  u.display_name = req.display_name.empty() ? req.username : req.display_name;
  u.email = req.email;
  u.role = req.role;
  u.kind = req.kind;
  if (req.kind == "human") {
    ATRIUM_ASSIGN_OR_RETURN(u.password_hash, hasher_->Hash(req.password));
  }
  u.state = "active";
  u.created_at = u.updated_at = clock_.NowMillis();
  ATRIUM_RETURN_IF_ERROR(store_.CreateUser(u));
  return u;
}

Result<User> IdentityService::UpdateUser(const Principal& actor, const TenantScope& scope,
                                         const std::string& id, const UserChanges& changes) {
  ATRIUM_ASSIGN_OR_RETURN(User u, store_.GetUser(scope, id));
  bool self = actor.user_id == id && actor.tenant_id == scope.tenant_id;
  if (changes.current_password && !changes.password) {
    return Error::InvalidArgument("current_password goes with a new password");
  }
  if (changes.role || changes.state || changes.password) {
    // A key acts for its owner with at most the owner's power; letting it
    // set the owner's password (then log in) or role would hand it the
    // owner's full login, or let a lesser key demote its owner.
    if (self && actor.is_api_key()) {
      return Error::PermissionDenied(
          "an API key cannot change its owner's password, role or state; log in to do that");
    }
    auto current_role = ParseRole(u.role);
    if (!self && (!current_role || !RoleCovers(actor.role, *current_role))) {
      return Error::PermissionDenied(
          "cannot change the password, role or state of a user whose role is above yours");
    }
  }
  if (changes.display_name) u.display_name = *changes.display_name;
  if (changes.email) u.email = *changes.email;
  if (changes.role) {
    auto role = ParseRole(*changes.role);
    if (!role) return Error::InvalidArgument("unknown role '" + *changes.role + "'");
    if (IsPlatformRole(*role) != scope.is_platform()) {
      return Error::InvalidArgument("a user's role must stay within its tenant or the platform");
    }
    if (!RoleCovers(actor.role, *role) || (self && *role != actor.role)) {
      return Error::PermissionDenied("cannot change this role");
    }
    u.role = *changes.role;
  }
  if (changes.state) {
    if (*changes.state != "active" && *changes.state != "disabled") {
      return Error::InvalidArgument("state must be 'active' or 'disabled'");
    }
    if (self) return Error::PermissionDenied("cannot disable yourself");
    u.state = *changes.state;
  }
  if (changes.password) {
    if (u.kind != "human") return Error::InvalidArgument("service accounts have no password");
    if (actor.is_restricted_key()) {
      return Error::PermissionDenied(
          "a scoped or expiring key cannot set a password: the login would outlive or outreach it");
    }
    if (self) {
      if (!changes.current_password) {
        return Error::InvalidArgument("changing your own password needs current_password");
      }
      // Guessing through this route counts like guessing at the login.
      const std::string account = "password-change/" + u.id;
      ATRIUM_RETURN_IF_ERROR(throttle_.Check(account, actor.credential));
      if (!hasher_->Verify(u.password_hash, *changes.current_password)) {
        throttle_.RecordFailure(account, actor.credential);
        return Error::PermissionDenied("current_password is wrong");
      }
    }
    ATRIUM_RETURN_IF_ERROR(ValidatePassword(*changes.password));
    ATRIUM_ASSIGN_OR_RETURN(u.password_hash, hasher_->Hash(*changes.password));
  }
  u.updated_at = clock_.NowMillis();
  ATRIUM_RETURN_IF_ERROR(store_.UpdateUser(scope, u));
  if (changes.state || changes.role || changes.password) {
    // Role, state or password changed: cached keys and sessions of the user
    // must be re-checked (sessions end on disable or password change).
    std::unique_lock lock(mu_);
    std::erase_if(key_cache_, [&](const auto& e) { return e.second.key.owner_user_id == id; });
  }
  if ((changes.state && *changes.state == "disabled") || changes.password) {
    ATRIUM_RETURN_IF_ERROR(store_.DeleteSessionsOfUser(scope, id));
  }
  return u;
}

Status IdentityService::DeleteUser(const TenantScope& scope, const std::string& id) {
  ATRIUM_RETURN_IF_ERROR(store_.DeleteUser(scope, id));
  std::unique_lock lock(mu_);
  std::erase_if(key_cache_, [&](const auto& e) { return e.second.key.owner_user_id == id; });
  return OkStatus();
}

Result<std::pair<ApiKey, std::string>> IdentityService::CreateApiKey(const Principal& actor,
                                                                     const TenantScope& scope,
                                                                     const NewApiKey& req) {
  if (req.name.empty() || req.name.size() > 128) {
    return Error::InvalidArgument("name must have 1-128 characters");
  }
  std::string owner_id = req.owner_user_id.empty() ? actor.user_id : req.owner_user_id;
  ATRIUM_ASSIGN_OR_RETURN(User owner, store_.GetUser(scope, owner_id));
  if (owner.state != "active") return Error::FailedPrecondition("owner is disabled");
  std::string role_name = req.role.empty() ? owner.role : req.role;
  auto role = ParseRole(role_name);
  if (!role) return Error::InvalidArgument("unknown role '" + role_name + "'");
  if (IsPlatformRole(*role) != scope.is_platform()) {
    return Error::InvalidArgument(scope.is_platform() ? "platform keys take a platform role"
                                                      : "tenant keys take a tenant role");
  }
  auto owner_role = ParseRole(owner.role);
  if (!owner_role || !RoleCovers(*owner_role, *role) || !RoleCovers(actor.role, *role)) {
    return Error::PermissionDenied("a key's role cannot exceed its owner's or yours");
  }
  if (req.expires_at != 0 && req.expires_at <= clock_.NowMillis()) {
    return Error::InvalidArgument("expires_at must be in the future");
  }
  // A scoped or expiring creator makes keys at most as scoped and as short
  // lived as itself; what the request leaves out it inherits.
  std::vector<std::string> scopes = req.scopes;
  if (!actor.scopes.empty()) {
    if (scopes.empty()) scopes = actor.scopes;
    for (const auto& scope_name : scopes) {
      if (std::find(actor.scopes.begin(), actor.scopes.end(), scope_name) == actor.scopes.end()) {
        return Error::PermissionDenied("scope '" + scope_name + "' is not among your key's scopes");
      }
    }
  }
  int64_t expires_at = req.expires_at;
  if (actor.expires_at != 0) {
    if (expires_at == 0) expires_at = actor.expires_at;
    if (expires_at > actor.expires_at) {
      return Error::PermissionDenied("a key cannot outlive the key that creates it");
    }
  }
  GeneratedApiKey generated = GenerateApiKey();
  ApiKey k;
  k.id = generated.key_id;
  k.tenant_id = scope.tenant_id;
  k.owner_user_id = owner.id;
  k.name = req.name;
  k.role = role_name;
  k.scopes = std::move(scopes);
  k.secret_hash = generated.secret_hash;
  k.created_at = clock_.NowMillis();
  k.expires_at = expires_at;
  ATRIUM_RETURN_IF_ERROR(store_.CreateApiKey(k));
  return std::make_pair(k, generated.text);
}

Status IdentityService::RevokeApiKey(const TenantScope& scope, const std::string& id) {
  ATRIUM_RETURN_IF_ERROR(store_.RevokeApiKey(scope, id, clock_.NowMillis()));
  std::unique_lock lock(mu_);
  key_cache_.erase(id);
  return OkStatus();
}

void IdentityService::ForgetTenant(const std::string& tenant_id) {
  std::unique_lock lock(mu_);
  tenant_state_.erase(tenant_id);
  std::erase_if(key_cache_, [&](const auto& e) { return e.second.key.tenant_id == tenant_id; });
}

Result<std::string> IdentityService::BootstrapAdminKey(const std::string& name) {
  auto existing = store_.GetUserByName(TenantScope::Platform(), name);
  User owner;
  if (existing.has_value()) {
    owner = *existing;
  } else {
    Principal system;
    system.role = Role::kPlatformAdmin;
    NewUser req;
    req.username = name;
    req.display_name = "Bootstrap platform administrator";
    req.role = std::string(RoleName(Role::kPlatformAdmin));
    req.kind = "service";
    ATRIUM_ASSIGN_OR_RETURN(owner, CreateUser(system, TenantScope::Platform(), req));
  }
  Principal actor;
  actor.role = Role::kPlatformAdmin;
  actor.user_id = owner.id;
  NewApiKey key_req;
  key_req.name = "bootstrap";
  ATRIUM_ASSIGN_OR_RETURN(auto created, CreateApiKey(actor, TenantScope::Platform(), key_req));
  return created.second;
}

bool IdentityService::IsValidCredential(const std::string& key_text) {
  return Authenticate(key_text).has_value();
}

}  // namespace atrium
