// An in-process control plane for API tests: a real SQLite store in a temp
// dir, the identity and tenancy services on a ManualClock, and
// ControlPlaneApi::Handle driven with hand-built http::Requests (no sockets).
//
// Seeding goes through the API itself with a bootstrap platform-admin key, so
// a broken create route shows up as a failed seed. Seeding helpers throw
// std::runtime_error on an unexpected answer; gtest reports that as a failure
// of the test (or of SetUpTestSuite) that called them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/api.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "identity/identity_service.h"
#include "identity/roles.h"
#include "jobs/archive_service.h"
#include "jobs/fake_backend.h"
#include "jobs/job_service.h"
#include "scheduling/scheduling_service.h"
#include "store/store.h"
#include "tenancy/tenant_service.h"

namespace atrium::api::fixture {

// Every human the fixture creates gets this password (fast hashing in tests).
inline constexpr char kTestPassword[] = "correct-horse-battery-staple";
// The peer address every request claims to come from unless told otherwise.
inline constexpr char kTestSource[] = "203.0.113.7";
// The simulated fleet of every harness: room for thousands of small shares.
inline constexpr char kTestFleet[] = "1xH100-80GBx8,1xA100-80GBx8,8xL40Sx4";
// The node the matrix cordons and drains, and a small share every seeded
// allocation asks for (one thousandth of an L40S).
inline constexpr char kTestNode[] = "l40s-7";
Json SmallShareBody();
// A job of `command` on SmallShareBody()'s resources.
Json SmallJobBody(const std::string& name = "fixture-job");
// A tar of one script, run.sh: a valid job archive.
std::string SmallArchive();
// Every world has one shared deployment of kSharedModel, which its seeded
// tenants are entitled to, and each seeded tenant a dedicated deployment of
// kDedicatedModel.
inline constexpr char kSharedModel[] = "shared-model";
// Each seeded tenant's managed deployment (with an adapter) serves this.
inline constexpr char kManagedModel[] = "managed-model";
inline constexpr char kDedicatedModel[] = "dedicated-model";

// A user with one active API key. Platform staff have tenant_id "".
struct Actor {
  Role role = Role::kTenantViewer;
  std::string tenant_id;
  std::string tenant_name;
  std::string user_id;
  std::string username;
  std::string password;  // "" for service accounts
  std::string key_id;
  std::string key;  // the key text, "atr_..."
  // A running allocation this actor requested (tenant admins and members
  // of seeded tenants; "" otherwise).
  std::string allocation_id;
  // A running job this actor submitted (tenant admins and members of
  // seeded tenants; "" otherwise).
  std::string job_id;
};

// A tenant with one user (and key) per requested tenant role, plus an extra
// tenant-member "object" user with a key, for callers to act on.
struct TenantSeed {
  std::string id;
  std::string name;
  std::map<Role, Actor> members;
  Actor object;
  // The object user's running allocation, and a project (with a quota
  // split) of the tenant. The tenant has an L40S share quota.
  std::string allocation_id;
  std::string project;
  // The object user's running job (on the harness's fake backend).
  std::string job_id;
  // The tenant's dedicated deployment, and the ids of two usage records
  // of the object user's key.
  std::string deployment_id;
  std::vector<std::string> usage_ids;
  // The tenant's environment template, as "name@1".
  std::string template_ref;
  // An archive the object user uploaded (SmallArchive()), and its SHA-256.
  std::string archive_id;
  std::string archive_sha256;
  // A managed dedicated deployment (no replicas) allowing adapters, and the
  // object user's adapter on it, from that archive.
  std::string managed_deployment_id;
  std::string adapter_id;
  // The tenant's final invoice for 2020-01 (nothing billed: total 0).
  std::string invoice_id;
  // A budget of its project (large: it never stops the world's work).
  std::string budget_id;
};

// Everything one isolation case needs: an own tenant, another tenant, the
// platform, and credentials that must fail.
struct World {
  TenantSeed own;                  // "tenant A"
  TenantSeed other;                // "tenant B"
  std::map<Role, Actor> platform;  // platform-role callers
  Actor platform_object;           // a platform-operator service account to act on
  // Per role: a revoked key and an expired key of that role's caller.
  std::map<Role, std::string> revoked_key;
  std::map<Role, std::string> expired_key;
  // A suspended tenant with one user (and key) per requested tenant role.
  TenantSeed suspended;
  // An access token from logging in as own's tenant-admin ("" unless the
  // world has human callers and a tenant-admin).
  std::string own_admin_token;
  // The world's shared deployment (of kSharedModel).
  std::string shared_deployment_id;
  // A platform environment template, as "name@1".
  std::string platform_template_ref;
  // A price book (USD), the default one.
  std::string book_id;
};

struct WorldOptions {
  std::vector<Role> roles = AllRoles();  // callers to create
  bool other_members = true;             // role users in `other` too, not only its object
  // Revoked and expired keys and the suspended tenant. Expiring keys are
  // made with expires_in_seconds=60, then the clock moves 61 s.
  bool bad_credentials = true;
  bool humans = true;  // callers are humans with kTestPassword (they can log in)
};

struct CallOptions {
  std::string content_type = "application/json";  // sent only with a body
  std::string source = kTestSource;
  std::map<std::string, std::string> headers;  // extra, lower-case names
};

class ApiHarness {
 public:
  // Opens a fresh store in a new temp dir and bootstraps a root
  // platform-admin key. Throws std::runtime_error on failure.
  explicit ApiHarness(IdentityOptions identity_options = DefaultIdentityOptions());
  ~ApiHarness();
  ApiHarness(const ApiHarness&) = delete;
  ApiHarness& operator=(const ApiHarness&) = delete;

  static IdentityOptions DefaultIdentityOptions();

  // One request through ControlPlaneApi::Handle. `target` is the path plus an
  // optional query string; `bearer` "" sends no authorization header; `body`
  // "" sends no body. Each request gets a new request id (last_request_id()).
  http::Response Call(const std::string& method, const std::string& target,
                      const std::string& bearer = "", const std::string& body = "",
                      const CallOptions& options = {});
  http::Response CallJson(const std::string& method, const std::string& target,
                          const std::string& bearer, const Json& body,
                          const CallOptions& options = {});
  const std::string& last_request_id() const { return last_request_id_; }

  // Every error answer so far that did not have the shape
  // {"error":{"code","message","request_id"}} with the request's id.
  const std::vector<std::string>& error_shape_violations() const { return violations_; }

  // --- Seeding through the API with the root key (throw on failure) ---
  // A fresh, unique lower-case name starting with `prefix`.
  std::string UniqueName(const std::string& prefix);
  TenantSeed CreateTenant(const std::string& name_prefix);
  // A user of `role` in `tenant_id` ("" = platform) with one key.
  Actor CreateActor(const std::string& tenant_id, const std::string& tenant_name, Role role,
                    bool human);
  // Another key for `owner`; returns {key_id, key text}.
  std::pair<std::string, std::string> CreateKey(const Actor& owner,
                                                std::optional<int64_t> expires_in_s = {});
  void RevokeKey(const std::string& tenant_id, const std::string& key_id);
  void SuspendTenant(const std::string& tenant_id);
  // Requests SmallShareBody() as `actor`; returns the allocation id.
  std::string CreateAllocation(const Actor& actor);
  // Submits SmallJobBody() as `actor`; returns the job id.
  std::string CreateJob(const Actor& actor);
  // Uploads SmallArchive() as `actor`; returns the archive id.
  std::string CreateArchive(const Actor& actor);
  // A deployment of `model` with one endpoint: shared (tenant_id "") or
  // dedicated to the tenant. Returns its id.
  std::string CreateDeployment(const std::string& model, const std::string& tenant_id);
  // Publishes an environment template of `tenant_id` ("" = the platform's)
  // named `name`; returns "name@version".
  std::string PublishTemplate(const std::string& tenant_id, const std::string& name);
  // Stores a usage record of `key` (through the store, as the gateway
  // does) at the clock's time; returns its id.
  std::string AddUsage(const Actor& key_owner, const std::string& model);
  // Stores a closed GPU usage record (through the store, as the GPU meter
  // does): `subject_id` held one H100-80GB GPU in `project` for the minute
  // before the clock's time. Returns its id.
  std::string AddGpuUsage(const std::string& tenant_id, const std::string& project,
                          const std::string& subject_id);
  // Logs `actor` in with kTestPassword; returns the access token.
  std::string Login(const Actor& actor);
  World BuildWorld(const WorldOptions& options = {});

  // The base path of a tenant's ("" = the platform's) users and keys.
  static std::string ScopeBase(const std::string& tenant_id);

  ManualClock& clock() { return clock_; }
  Store& store() { return *store_; }
  billing::BillingService& billing() { return *billing_; }
  IdentityService& identity() { return *identity_; }
  TenantService& tenants() { return *tenants_; }
  scheduling::SchedulingService& scheduling() { return *scheduling_; }
  jobs::JobService& jobs() { return *jobs_; }
  // Uploaded job archives, kept in the harness's temp dir (at most 1 MiB).
  jobs::ArchiveService& archives() { return *archives_; }
  // The in-memory execution backend the jobs run on.
  jobs::testing::FakeBackend& backend() { return *backend_; }
  // The serving controller (never ticking by itself): shared managed
  // deployments run as the tenant named kServingTenant, adapters are
  // unpacked under the harness's temp dir, and engines are never reached
  // (no replica gets that far without a test's Tick).
  static constexpr char kServingTenant[] = "platform-serving";
  serving::DeploymentController& serving() { return *serving_; }
  ControlPlaneApi& api() { return *api_; }
  const std::string& root_key() const { return root_key_; }
  // The API again, on services `change` edits (e.g. the operator requires
  // entitlements for dedicated deployments).
  void Reconfigure(const std::function<void(Services&)>& change);
  // Stops the scheduling service and starts a new one on the same store,
  // as a restart of the server would. Throws if it does not start.
  void RestartScheduling();
  // The rig's egress policy: like an operator whose model servers run on
  // its cluster network, it opens 10.0.0.0/8 to tenants' deployments.
  gateway::EgressPolicy& egress() { return *egress_; }

 private:
  // Calls as root and throws unless the status is `want`.
  Json MustCall(const std::string& method, const std::string& target, const Json& body, int want);
  void CheckErrorShape(const http::Response& response, const std::string& request_id,
                       const std::string& what);

  std::filesystem::path dir_;
  ManualClock clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<IdentityService> identity_;
  std::unique_ptr<TenantService> tenants_;
  std::unique_ptr<scheduling::SchedulingService> scheduling_;
  std::unique_ptr<jobs::testing::FakeBackend> backend_;
  std::unique_ptr<jobs::ArchiveService> archives_;
  std::unique_ptr<jobs::JobService> jobs_;
  std::unique_ptr<jobs::JobsTenantObserver> tenant_observer_;
  std::unique_ptr<jobs::ArchivesTenantObserver> archives_observer_;
  std::unique_ptr<serving::DeploymentController> serving_;
  std::unique_ptr<billing::BillingService> billing_;
  // Starts the job service over scheduling_ and hands the tenant service
  // the observer that stops jobs before the scheduler evicts.
  void StartJobs();
  // The serving controller over jobs_ (again after RestartScheduling).
  void StartServing();
  std::unique_ptr<templates::TemplateService> templates_;
  std::shared_ptr<gateway::EgressPolicy> egress_;
  Services services_;
  std::unique_ptr<ControlPlaneApi> api_;
  std::string root_key_;
  int64_t next_request_ = 0;
  int64_t next_name_ = 0;
  std::string last_request_id_;
  std::vector<std::string> violations_;
};

// Parses a response body as JSON (null when it is not JSON).
Json BodyOf(const http::Response& response);

// Two tenants, acme (alice, its admin) and bolt (bob), each with one L40S
// share guaranteed: the jobs routes' tests act as one and attack as the other.
class TwoJobTenantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = h_.CreateTenant("acme");
    b_ = h_.CreateTenant("bolt");
    alice_ = h_.CreateActor(a_.id, a_.name, Role::kTenantAdmin, /*human=*/false);
    bob_ = h_.CreateActor(b_.id, b_.name, Role::kTenantAdmin, /*human=*/false);
    for (const std::string& t : {a_.id, b_.id}) {
      http::Response r = h_.CallJson(
          "PUT", "/api/v1/tenants/" + t + "/quotas", h_.root_key(),
          {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", 1000}, {"limit_milli", 1000}});
      ASSERT_EQ(r.status, 200) << r.body;
    }
  }
  // The single number `sql` selects (-1 when it fails).
  int64_t Rows(const std::string& sql) {
    auto r = h_.store().database().Exec(sql, {});
    return r.has_value() ? r->rows.at(0).Int(0) : -1;
  }

  ApiHarness h_;
  TenantSeed a_, b_;
  Actor alice_, bob_;
};

}  // namespace atrium::api::fixture
