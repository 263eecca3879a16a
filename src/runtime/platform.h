// Wires the store, the services and the HTTP listener into one running
// control plane. `atrium dev` and `atrium server` both run a Platform; tests
// start the real binary instead. Start() is followed by Stop() in reverse.
#pragma once

#include <memory>
#include <string>

#include "api/api.h"
#include "billing/billing_service.h"
#include "common/clock.h"
#include "gateway/egress_policy.h"
#include "gateway_server/gateway_server.h"
#include "gateway_server/load_reporter.h"
#include "gateway_server/policy_loader.h"
#include "gateway_server/usage_journal.h"
#include "http/server.h"
#include "identity/identity_service.h"
#include "metering/gpu_meter.h"
#include "runtime/audit_checkpointer.h"
#include "runtime/bootstrap_admin.h"
#include "runtime/config.h"
#include "runtime/fleet_discovery.h"
#include "runtime/gpu_health_watcher.h"
#include "runtime/workloads.h"
#include "scheduling/scheduling_service.h"
#include "serving/deployment_controller.h"
#include "store/store.h"
#include "templates/template_service.h"
#include "tenancy/tenant_service.h"

namespace atrium {

struct PlatformUrls {
  std::string api;      // http://host:port, "" without the control-plane role
  std::string gateway;  // http://host:port, "" without the gateway role
};

class Platform {
 public:
  explicit Platform(Config config);
  ~Platform();

  // Opens the store (applying migrations) and starts the roles the
  // configuration names: the control plane (services, API listener) and the
  // gateway (usage journal, policy loader, gateway listener).
  Result<PlatformUrls> Start();
  // Stops accepting, drains requests in flight, then closes the store.
  void Stop();

  // Control-plane role only.
  IdentityService& identity() { return *identity_; }
  TenantService& tenants() { return *tenants_; }
  Store& store() { return *store_; }
  // Which fleet the control plane runs on and what NVML reported (driver and
  // CUDA versions, GPUs), as chosen at Start.
  const FleetDiscovery& fleet_discovery() const { return fleet_discovery_; }
  // Gateway role only: reload the policy now (dev set-up after it changed).
  Status RefreshGatewayPolicy();

 private:
  Result<std::string> StartControlPlane();  // returns the API URL
  Result<std::string> StartGateway();       // returns the gateway URL

  Config config_;
  // Where tenants' dedicated deployments may send requests: the API checks
  // endpoints against it when they are written, the gateway when it connects.
  std::shared_ptr<gateway::EgressPolicy> egress_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<TenantService> tenants_;
  FleetDiscovery fleet_discovery_;
  std::unique_ptr<scheduling::SchedulingService> scheduling_;
  std::unique_ptr<Workloads> workloads_;
  std::unique_ptr<serving::DeploymentController> serving_;  // with workloads_
  std::unique_ptr<GpuHealthWatcher> gpu_health_;            // while the host's GPUs are used
  std::unique_ptr<templates::TemplateService> templates_;
  std::unique_ptr<AuditCheckpointer> checkpointer_;
  std::unique_ptr<metering::GpuMeter> meter_;
  std::unique_ptr<billing::BillingService> billing_;
  std::unique_ptr<api::ControlPlaneApi> api_;
  std::unique_ptr<http::Server> server_;
  std::shared_ptr<gateway_server::BudgetKeeper> budgets_;  // before journal_: outlives it
  std::unique_ptr<gateway_server::UsageJournal> journal_;
  std::unique_ptr<gateway_server::PolicyLoader> policy_;
  std::unique_ptr<gateway_server::GatewayServer> gateway_;
  std::unique_ptr<gateway_server::LoadReporter> load_reporter_;  // after gateway_: goes first
};

// Production bootstrap (`atrium bootstrap-admin`): opens the configured
// store, applies migrations, and returns a new API key of the platform's
// bootstrap-admin service account, creating the account on first use; both
// audited. An account that still has an active key is refused unless
// `rotate` (see runtime/bootstrap_admin.h).
Result<BootstrapAdminResult> CreateBootstrapAdminKey(const Config& config, bool rotate);

// Writes `text` and a newline to `path` with mode 0600 (created or truncated).
Status WriteSecretFile(const std::string& path, const std::string& text);

// Blocks until SIGINT or SIGTERM arrives (signals must be blocked in every
// thread first: call BlockStopSignals() at the top of main).
void BlockStopSignals();
int WaitForStopSignal();

}  // namespace atrium
