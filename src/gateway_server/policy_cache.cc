#include "gateway_server/policy_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/atomic_file.h"

namespace atrium {

// JSON of the records the snapshot is built from (found by ADL; this file's
// own: nothing else converts these records with nlohmann).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Tenant, id, name, display_name, tier, regions,
                                                weight, labels, state, created_at, updated_at)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ApiKey, id, tenant_id, owner_user_id, name, role,
                                                scopes, secret_hash, created_at, expires_at,
                                                revoked_at)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatewayKeyRow, key, owner_state, owner_role)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeploymentEndpoint, url, capacity, max_prefill,
                                                burst)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DeploymentRecord, id, model, version, endpoints,
                                                region, latency_tier, visibility, tenant_id,
                                                created_at, updated_at)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(EntitlementRecord, tenant_id, model, created_at)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatewayLimits, requests_per_minute,
                                                tokens_per_minute, max_concurrent, max_queued)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatewayLimitRecord, tenant_id, key_id, limits,
                                                priority, updated_at)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatewayPolicyRows, tenants, keys, deployments,
                                                entitlements, limits, marker)

}  // namespace atrium

namespace atrium::gateway_server {
namespace {

constexpr int kFormat = 1;

}  // namespace

Status SavePolicyRows(const std::string& path, const GatewayPolicyRows& rows, int64_t now_ms) {
  nlohmann::json doc = {{"format", kFormat}, {"saved_at", now_ms}, {"rows", rows}};
  return ReplaceFileAtomically(path, doc.dump());
}

Result<CachedPolicy> LoadPolicyRows(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::NotFound("no saved policy at " + path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json doc = nlohmann::json::parse(text.str());
    if (!doc.is_object() || doc.value("format", 0) != kFormat || !doc.contains("rows")) {
      return Error::InvalidArgument(path + " is not a saved gateway policy");
    }
    CachedPolicy cached;
    cached.saved_at = doc.value("saved_at", int64_t{0});
    cached.rows = doc.at("rows").get<GatewayPolicyRows>();
    return cached;
  } catch (const nlohmann::json::exception& e) {
    return Error::InvalidArgument(path + " cannot be read: " + e.what());
  }
}

}  // namespace atrium::gateway_server
