#include "runtime/dev_models.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>

#include "crypto/crypto.h"

namespace atrium {
namespace {

constexpr int kSimulators = 2;
constexpr int64_t kDevMaxPrefill = 2;  // the simulated endpoints' max_prefill
constexpr int64_t kDevBurst = 8;       // and burst, within the engine's batch
constexpr const char* kDemoTenant = "demo";
constexpr const char* kDemoAccount = "demo-app";

// What `atrium dev` sets up is in the audit trail like any change: actor
// "system", no HTTP request behind it (status 0), source "atrium dev".
void AuditSetUp(Store& store, const std::string& tenant_id, const std::string& action,
                const std::string& target) {
  AuditRecord r;
  r.time = SystemClock::Instance().NowMillis();
  r.actor = "system";
  r.actor_role = std::string(RoleName(Role::kPlatformAdmin));
  r.tenant_id = tenant_id;
  r.action = action;
  r.target = target;
  r.outcome = "allowed";
  r.source = "atrium dev";
  auto appended = store.AppendAudit(std::move(r));
  if (!appended.has_value()) {
    spdlog::error("atrium dev: audit append failed for {}: {}", action, appended.error().message);
  }
}

Result<Tenant> EnsureDemoTenant(Platform& platform) {
  auto existing = platform.store().GetTenantByName(kDemoTenant);
  if (existing.has_value()) return existing;
  if (existing.error().code != ErrorCode::kNotFound) return existing.error();
  NewTenant req;
  req.name = kDemoTenant;
  req.display_name = "Demo tenant (atrium dev)";
  auto created = platform.tenants().Create(req);
  if (created.has_value()) {
    AuditSetUp(platform.store(), created->id, "tenant.create", "tenant/" + created->id);
  }
  return created;
}

Result<std::string> EnsureDemoKey(Platform& platform, const Tenant& tenant,
                                  const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string existing;
  if (in && std::getline(in, existing) && platform.identity().IsValidCredential(existing)) {
    return existing;
  }
  const TenantScope scope = TenantScope::Of(tenant.id);
  auto user = platform.store().GetUserByName(scope, kDemoAccount);
  if (!user.has_value()) {
    if (user.error().code != ErrorCode::kNotFound) return user.error();
    Principal system;
    system.role = Role::kPlatformAdmin;
    NewUser req;
    req.username = kDemoAccount;
    req.display_name = "Demo application (atrium dev)";
    req.role = std::string(RoleName(Role::kTenantAdmin));
    req.kind = "service";
    ATRIUM_ASSIGN_OR_RETURN(user, platform.identity().CreateUser(system, scope, req));
    AuditSetUp(platform.store(), tenant.id, "user.create",
               "tenant/" + tenant.id + "/user/" + user->id);
  }
  Principal actor;
  actor.tenant_id = tenant.id;
  actor.user_id = user->id;
  actor.role = Role::kTenantAdmin;
  NewApiKey key_req;
  key_req.name = "demo";
  ATRIUM_ASSIGN_OR_RETURN(auto created, platform.identity().CreateApiKey(actor, scope, key_req));
  AuditSetUp(platform.store(), tenant.id, "key.create",
             "tenant/" + tenant.id + "/key/" + created.first.id);
  ATRIUM_RETURN_IF_ERROR(WriteSecretFile(path.string(), created.second));
  return created.second;
}

}  // namespace

DevModels::~DevModels() {
  for (auto& sim : sims_) sim->Stop();
}

Result<std::unique_ptr<DevModels>> DevModels::Start(Platform& platform,
                                                    const std::filesystem::path& data_dir) {
  auto models = std::unique_ptr<DevModels>(new DevModels());
  DeploymentRecord deployment;
  deployment.id = kDevDeploymentId;
  deployment.model = kDevModel;
  deployment.version = "engine-sim h100-llama3-8b (simulator)";
  deployment.region = "local";
  deployment.latency_tier = "interactive";
  deployment.visibility = "shared";
  for (int i = 0; i < kSimulators; ++i) {
    engine_sim::ServerOptions options;
    options.model = kDevModel;
    options.profile = "h100-llama3-8b";
    auto sim = std::make_unique<engine_sim::Server>(options);
    ATRIUM_ASSIGN_OR_RETURN(int port, sim->Start());
    std::string url = "http://127.0.0.1:" + std::to_string(port);
    models->urls_.push_back(url);
    // Prefill pacing on: the simulator, like an engine without chunked
    // prefill, stalls its batch for joining requests' prefills, and pacing a
    // flooding tenant's refills keeps other tenants' first tokens near their
    // idle figure at a few per cent of throughput (BENCHMARKS.md §6.3).
    // Burst slots let a light tenant's bursts start at once; capacity and
    // burst together stay within what the engine batches.
    const int64_t batch = sim->profile().max_batch;
    deployment.endpoints.push_back({url, std::max<int64_t>(1, batch - kDevBurst), kDevMaxPrefill,
                                    std::min(kDevBurst, batch - 1)});
    models->sims_.push_back(std::move(sim));
  }
  Store& store = platform.store();
  const int64_t now = SystemClock::Instance().NowMillis();
  deployment.updated_at = now;
  auto existing = store.GetDeploymentForPlatform(kDevDeploymentId);
  if (existing.has_value()) {
    deployment.created_at = existing->created_at;
    ATRIUM_RETURN_IF_ERROR(store.UpdateDeployment(TenantScope::Platform(), deployment));
    // The simulators listen on new ports each start.
    AuditSetUp(store, "", "deployment.update", std::string("platform/deployment/") + deployment.id);
  } else {
    deployment.created_at = now;
    ATRIUM_RETURN_IF_ERROR(store.CreateDeployment(deployment));
    AuditSetUp(store, "", "deployment.create", std::string("platform/deployment/") + deployment.id);
  }
  ATRIUM_ASSIGN_OR_RETURN(Tenant demo, EnsureDemoTenant(platform));
  auto entitled = store.ListEntitlements(TenantScope::Of(demo.id));
  const bool had = entitled.has_value() &&
                   std::any_of(entitled->begin(), entitled->end(),
                               [](const EntitlementRecord& e) { return e.model == kDevModel; });
  ATRIUM_RETURN_IF_ERROR(store.GrantEntitlement(TenantScope::Of(demo.id), kDevModel, now));
  if (!had) {
    AuditSetUp(store, demo.id, "entitlement.grant",
               "tenant/" + demo.id + "/entitlement/" + std::string(kDevModel));
  }
  models->demo_key_path_ = (data_dir / "demo.key").string();
  ATRIUM_RETURN_IF_ERROR(EnsureDemoKey(platform, demo, models->demo_key_path_));
  // The gateway polls for changes; reload now so the first call finds them.
  ATRIUM_RETURN_IF_ERROR(platform.RefreshGatewayPolicy());
  return models;
}

}  // namespace atrium
