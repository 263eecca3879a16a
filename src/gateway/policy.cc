#include "gateway/policy.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <set>

#include "crypto/crypto.h"
#include "identity/api_key.h"
#include "identity/roles.h"

namespace atrium::gateway {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The token of "Bearer <token>" (the scheme is case-insensitive), or "".
std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  header = Trim(header);
  if (header.size() <= kScheme.size() ||
      (header[kScheme.size()] != ' ' && header[kScheme.size()] != '\t')) {
    return {};
  }
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return {};
  }
  return Trim(header.substr(kScheme.size()));
}

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// Data residency: the deployment is in one of the tenant's regions (a
// tenant without regions: any).
bool InRegions(const Caller& caller, const DeploymentRecord& d) {
  return caller.regions.empty() || Contains(caller.regions, d.region);
}

Error ModelNotFound(std::string_view model) {
  return Error::NotFound("The model `" + std::string(model) +
                         "` does not exist or you do not have access to it.");
}

// Everything about a key that depends on neither the presented secret nor
// the time, decided once per snapshot.
Result<Caller> KeyVerdict(
    const GatewayKeyRow& row, const std::unordered_map<std::string, const Tenant*>& tenants,
    const std::unordered_map<std::string, GatewayLimits>& tenant_limits,
    const std::unordered_map<std::string, const GatewayLimitRecord*>& key_limits) {
  const ApiKey& key = row.key;
  if (row.owner_state != "active") return Error::Unauthenticated("the key's owner is disabled");
  auto role = ParseRole(key.role);
  auto owner_role = ParseRole(row.owner_role);
  if (!role || !owner_role) return Error::Unauthenticated("invalid API key");
  // As IdentityService: a key never acts above its owner as the owner is now.
  if (!RoleCovers(*owner_role, *role)) {
    return Error::Unauthenticated("the key's role exceeds its owner's current role");
  }
  if (key.tenant_id.empty()) {
    return Error::PermissionDenied("platform keys cannot call models; use a tenant's API key");
  }
  auto tenant = tenants.find(key.tenant_id);
  if (tenant == tenants.end()) return Error::Unauthenticated("invalid API key");
  if (tenant->second->state != "active") {
    return Error::Unauthenticated("tenant is " + tenant->second->state);
  }
  if (ReachOf(*role, Permission::kModelInvoke) == Reach::kNone) {
    return Error::PermissionDenied("the key's role " + key.role + " may not call models");
  }

  Caller caller;
  caller.tenant_id = key.tenant_id;
  caller.key_id = key.id;
  caller.role = key.role;
  caller.scopes = key.scopes;
  caller.weight = static_cast<double>(std::max<int64_t>(1, tenant->second->weight));
  caller.regions = tenant->second->regions;
  GatewayLimits tenant_wide;
  if (auto it = tenant_limits.find(key.tenant_id); it != tenant_limits.end()) {
    tenant_wide = it->second;
  }
  GatewayLimits own;
  if (auto it = key_limits.find(key.id);
      it != key_limits.end() && it->second->tenant_id == key.tenant_id) {
    own = it->second->limits;
    if (it->second->priority == "batch") caller.priority = Priority::kBatch;
  }
  caller.subjects = {{"tenant:" + key.tenant_id, tenant_wide}, {"key:" + key.id, own}};
  return caller;
}

}  // namespace

GatewayPolicyRows WithoutUnentitledDedicated(GatewayPolicyRows rows) {
  std::set<std::pair<std::string, std::string>> entitled;  // (tenant, model)
  for (const EntitlementRecord& e : rows.entitlements) entitled.emplace(e.tenant_id, e.model);
  std::erase_if(rows.deployments, [&](const DeploymentRecord& d) {
    return d.visibility == "dedicated" && !entitled.contains({d.tenant_id, d.model});
  });
  return rows;
}

std::shared_ptr<const PolicySnapshot> PolicySnapshot::Build(GatewayPolicyRows rows,
                                                            int64_t version) {
  static std::atomic<uint64_t> serials{0};
  std::shared_ptr<PolicySnapshot> snapshot(new PolicySnapshot());
  snapshot->version_ = version;
  snapshot->serial_ = serials.fetch_add(1) + 1;

  snapshot->deployments_ = std::move(rows.deployments);
  auto& deployments = snapshot->deployments_;
  std::sort(deployments.begin(), deployments.end(),
            [](const DeploymentRecord& a, const DeploymentRecord& b) { return a.id < b.id; });
  for (const DeploymentRecord& d : deployments) {
    snapshot->by_id_[d.id] = &d;
    // Anything but the two known visibilities serves no one (deny by default).
    if (d.visibility == "dedicated" && !d.tenant_id.empty()) {
      snapshot->dedicated_[d.tenant_id][d.model].push_back(&d);
    } else if (d.visibility == "shared") {
      snapshot->shared_[d.model].push_back(&d);
    }
  }
  for (const EntitlementRecord& e : rows.entitlements) {
    snapshot->entitled_[e.tenant_id].insert(e.model);
  }
  for (const AdapterRecord& a : rows.adapters) {
    auto d = snapshot->by_id_.find(a.deployment_id);
    if (a.status != "ready" || d == snapshot->by_id_.end() || !d->second->managed()) continue;
    snapshot->adapters_[a.tenant_id][d->second->model + ":" + a.name] = {d->second, a.id};
  }

  std::unordered_map<std::string, const Tenant*> tenants;
  for (const Tenant& t : rows.tenants) tenants[t.id] = &t;
  std::unordered_map<std::string, GatewayLimits> tenant_limits;
  std::unordered_map<std::string, const GatewayLimitRecord*> key_limits;
  for (const GatewayLimitRecord& l : rows.limits) {
    if (l.key_id.empty()) {
      tenant_limits[l.tenant_id] = l.limits;
    } else {
      key_limits[l.key_id] = &l;
    }
  }
  for (const GatewayKeyRow& row : rows.keys) {
    snapshot->keys_.emplace(
        row.key.id, KeyEntry{row.key.secret_hash, row.key.expires_at, row.key.revoked_at != 0,
                             KeyVerdict(row, tenants, tenant_limits, key_limits)});
  }
  return snapshot;
}

Result<const Caller*> PolicySnapshot::Authenticate(std::string_view authorization_header,
                                                   int64_t now_ms, KeyMemo* memo) const {
  const KeyEntry* remembered = nullptr;
  // Compared in constant time like a secret: the memo holds a verified key.
  if (memo != nullptr && memo->snapshot == serial_ &&
      crypto::ConstantTimeEquals(memo->header, authorization_header)) {
    if (auto it = keys_.find(memo->key_id); it != keys_.end()) remembered = &it->second;
  }
  if (remembered == nullptr) {
    if (Trim(authorization_header).empty()) {
      return Error::Unauthenticated(
          "You didn't provide an API key. Send it in the Authorization header: Bearer <API key>");
    }
    std::string_view token = BearerToken(authorization_header);
    if (token.empty()) {
      return Error::Unauthenticated("the Authorization header must be: Bearer <API key>");
    }
    ATRIUM_ASSIGN_OR_RETURN(ParsedApiKey parsed, ParseApiKey(token));
    auto it = keys_.find(parsed.key_id);
    if (it == keys_.end()) return Error::Unauthenticated("invalid API key");
    if (!crypto::ConstantTimeEquals(it->second.secret_hash, HashApiKeySecret(parsed.secret))) {
      return Error::Unauthenticated("invalid API key");
    }
    remembered = &it->second;
    if (memo != nullptr) {
      memo->snapshot = serial_;
      memo->header.assign(authorization_header);
      memo->key_id = parsed.key_id;
    }
  }
  const KeyEntry& entry = *remembered;
  if (entry.revoked) return Error::Unauthenticated("API key revoked");
  if (entry.expires_at != 0 && now_ms >= entry.expires_at) {
    return Error::Unauthenticated("API key expired");
  }
  if (!entry.verdict.has_value()) return entry.verdict.error();
  return &*entry.verdict;
}

void PolicySnapshot::AppendDedicated(const Caller& caller, const std::string& model,
                                     Deployments& out) const {
  auto tenant = dedicated_.find(caller.tenant_id);
  if (tenant == dedicated_.end()) return;
  auto own = tenant->second.find(model);
  if (own == tenant->second.end()) return;
  for (const DeploymentRecord* d : own->second) {
    if (InRegions(caller, *d)) out.push_back(d);
  }
}

void PolicySnapshot::AppendShared(const Caller& caller, const std::string& model,
                                  Deployments& out) const {
  auto entitled = entitled_.find(caller.tenant_id);
  if (entitled == entitled_.end() || entitled->second.count(model) == 0) return;
  auto shared = shared_.find(model);
  if (shared == shared_.end()) return;
  for (const DeploymentRecord* d : shared->second) {
    if (InRegions(caller, *d)) out.push_back(d);
  }
}

Result<ModelRoute> PolicySnapshot::Resolve(const Caller& caller, std::string_view model) const {
  ModelRoute route{std::string(model), {}, ""};
  if (caller.scopes.empty() || Contains(caller.scopes, route.model)) {
    AppendDedicated(caller, route.model, route.deployments);
    AppendShared(caller, route.model, route.deployments);
  }
  if (!route.deployments.empty()) return route;
  if (auto adapter = ResolveAdapter(caller, route.model)) return std::move(*adapter);
  return ModelNotFound(model);
}

std::optional<ModelRoute> PolicySnapshot::ResolveAdapter(const Caller& caller,
                                                         const std::string& model) const {
  auto tenant = adapters_.find(caller.tenant_id);
  if (tenant == adapters_.end()) return std::nullopt;
  auto found = tenant->second.find(model);
  if (found == tenant->second.end()) return std::nullopt;
  const AdapterRoute& adapter = found->second;
  const std::string& base = adapter.deployment->model;
  if (!caller.scopes.empty() && !Contains(caller.scopes, model) && !Contains(caller.scopes, base)) {
    return std::nullopt;
  }
  // Only while the tenant may use the base model on that deployment
  // (entitled, in its regions; its own dedicated one).
  Deployments usable;
  AppendDedicated(caller, base, usable);
  AppendShared(caller, base, usable);
  if (std::find(usable.begin(), usable.end(), adapter.deployment) == usable.end()) {
    return std::nullopt;
  }
  return ModelRoute{model, {adapter.deployment}, adapter.id};
}

std::vector<std::string> PolicySnapshot::ModelsFor(const Caller& caller) const {
  std::vector<std::string> models;
  if (auto tenant = dedicated_.find(caller.tenant_id); tenant != dedicated_.end()) {
    for (const auto& [model, deployments] : tenant->second) {
      Deployments own;
      AppendDedicated(caller, model, own);
      if (!own.empty()) models.push_back(model);
    }
  }
  if (auto entitled = entitled_.find(caller.tenant_id); entitled != entitled_.end()) {
    for (const std::string& model : entitled->second) {
      Deployments shared;
      AppendShared(caller, model, shared);
      if (!shared.empty()) models.push_back(model);
    }
  }
  if (!caller.scopes.empty()) {
    std::erase_if(models, [&](const std::string& m) { return !Contains(caller.scopes, m); });
  }
  if (auto tenant = adapters_.find(caller.tenant_id); tenant != adapters_.end()) {
    for (const auto& [name, adapter] : tenant->second) {
      if (ResolveAdapter(caller, name)) models.push_back(name);
    }
  }
  std::sort(models.begin(), models.end());
  models.erase(std::unique(models.begin(), models.end()), models.end());
  return models;
}

const DeploymentRecord* PolicySnapshot::Deployment(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : it->second;
}

}  // namespace atrium::gateway
