// The control-plane REST API under /api/v1/. Handlers only translate HTTP to
// service calls; authentication, tenant resolution, authorization and the
// audit trail happen once, in ControlPlaneApi::Handle, driven by the route
// table (routes.cc) where every route names its permission.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "audit/checkpoint.h"
#include "audit/denial_tally.h"
#include "billing/billing_service.h"
#include "common/clock.h"
#include "common/json_reader.h"
#include "gateway/egress_policy.h"
#include "http/message.h"
#include "http/router.h"
#include "identity/identity_service.h"
#include "identity/roles.h"
#include "jobs/archive_service.h"
#include "jobs/job_service.h"
#include "scheduling/scheduling_service.h"
#include "serving/deployment_controller.h"
#include "store/store.h"
#include "templates/template_service.h"
#include "tenancy/tenant_service.h"

namespace atrium::api {

struct Services {
  Store* store = nullptr;
  IdentityService* identity = nullptr;
  TenantService* tenants = nullptr;
  const Clock* clock = nullptr;
  scheduling::SchedulingService* scheduling = nullptr;
  // Jobs on an execution backend; nullptr: the /jobs routes answer 503.
  jobs::JobService* jobs = nullptr;
  // Tenants' uploaded job archives; nullptr: their routes answer 503 (and
  // uploads are held to the server's JSON body limit).
  jobs::ArchiveService* archives = nullptr;
  // Environment templates; nullptr: their routes answer Unavailable.
  templates::TemplateService* templates = nullptr;
  // Managed deployments' controller; nullptr: creating or scaling one
  // answers 503 (external deployments are unaffected).
  serving::DeploymentController* serving = nullptr;
  // The last signed audit checkpoint (runtime/audit_checkpointer.h); unset
  // or nullopt when checkpoints are off or none was taken yet.
  std::function<std::optional<audit::Checkpoint>()> audit_checkpoint;
  // Where tenants' dedicated deployments may send requests; nullptr: the
  // default rules (public addresses only), with no listeners known.
  const gateway::EgressPolicy* egress = nullptr;
  // A dedicated deployment must be of a model its tenant is entitled to.
  bool dedicated_requires_entitlement = false;
  // LoRA adapters one tenant may hold, over every deployment.
  int64_t max_adapters_per_tenant = 20;
  // Rating, drafts and invoices; nullptr: drafts, finalising and verify
  // answer 503 (price books and plans are rows and work without it).
  billing::BillingService* billing = nullptr;
};

// How a route finds the object it acts on, for the authorization decision.
enum class TargetKind {
  kPublic,        // no credential needed
  kSelf,          // the caller itself (whoami, logout)
  kPlatformWide,  // no single tenant (create/list tenants, whole audit trail)
  kTenant,        // {tenant_id} in the path
  kTenantUser,    // {tenant_id} and {user_id}: the user owns itself
  kTenantKey,     // {tenant_id} and {key_id}: the key's owner
  kPlatform,      // the platform's own users and keys (tenant "")
  kPlatformUser,  // {user_id} among platform users
  kPlatformKey,   // {key_id} among platform keys
  // No tenant in the path: a tenant caller acts in its own tenant, platform
  // staff across every tenant (allocations, nodes, capacity).
  kCaller,
  // {allocation_id}: the allocation's tenant, owned by who requested it. A
  // tenant caller finds only its own tenant's; another's answers like a
  // missing id.
  kAllocation,
  // {deployment_id}: platform staff reach every deployment. A tenant caller
  // finds only what its tenant may use — its dedicated deployments and the
  // shared ones of models it is entitled to; anything else answers like a
  // missing id. Shared deployments are the platform's: tenants only read them.
  kDeployment,
  // {job_id}: the job's tenant, owned by who submitted it. Like
  // kAllocation, a tenant caller finds only its own tenant's.
  kJob,
};

struct Context {
  http::Request& request;
  const Services& services;
  std::optional<Principal> principal;
  TenantScope scope;         // the tenant the route acts in
  bool self_only = false;    // a list route narrowed to the caller's own objects
  std::string audit_target;  // what the record names; handlers may refine it
  // Set by handlers that act before a principal exists (login) or that
  // create a tenant (the record belongs in the new tenant's chain).
  std::string audit_actor;
  std::optional<std::string> audit_tenant;
  // The tenant in the path, when resolving it already read it (platform
  // callers), so handlers need not read it again.
  std::optional<Tenant> tenant;
  // The allocation a kAllocation route resolved.
  std::optional<AllocationRecord> allocation;
  // The deployment a kDeployment route resolved.
  std::optional<DeploymentRecord> deployment;
  // The job a kJob route resolved.
  std::optional<JobRecord> job;
};

using HandlerFn = std::function<Result<http::Response>(Context&)>;

struct RouteSpec {
  Permission permission = Permission::kNone;
  TargetKind target = TargetKind::kPublic;
  // Audited routes append a record whether allowed, denied or failed.
  std::string audit_action;  // "" = not audited (reads)
  HandlerFn handler;
  // A list route that a kSelf reach may call, seeing only its own objects.
  bool self_listable = false;
  std::string summary;  // one line, mirrored in the OpenAPI document
  // Whether the route reads a JSON body; a body sent to one that does not
  // is refused rather than silently ignored.
  bool takes_body = false;
  // Whether the body is an uploaded file (any media type, at most
  // ArchiveService::max_archive_bytes) rather than JSON.
  bool takes_upload = false;
  // Query parameters the route understands; any other is refused.
  std::vector<std::string> query_params;
};

using ApiRouter = http::Router<RouteSpec>;

// Builds the full route table (routes.cc).
ApiRouter BuildRoutes();

class ControlPlaneApi {
 public:
  explicit ControlPlaneApi(Services services);
  // Records what the unauthenticated-refusal tally still holds.
  ~ControlPlaneApi();

  // Thread-safe; never throws.
  http::Response Handle(http::Request& request);
  const ApiRouter& router() const { return router_; }
  // The body limit of an upload route (http::ServerOptions::body_limit_for);
  // 0 for every other (method, path): the server's default applies.
  size_t BodyLimitFor(std::string_view method, std::string_view path) const;

  // Refusals of audited routes without a principal (no, bad or throttled
  // credentials), counted since start: the flood metric. They reach the
  // trail as one summary record per (action, status, reason) and minute
  // (audit/denial_tally.h), written when a later audited request or the
  // shutdown finds the minute over.
  int64_t unauthenticated_denials() const;

 private:
  Result<http::Response> Dispatch(Context& ctx, const RouteSpec& spec);
  Status ResolveAndAuthorize(Context& ctx, const RouteSpec& spec);
  void Audit(const Context& ctx, const RouteSpec& spec, int status, const std::string& outcome);
  void AppendSummaries(std::vector<AuditRecord> summaries);

  Services services_;
  ApiRouter router_;
  mutable std::mutex denials_mu_;
  audit::DenialTally denials_;  // guarded by denials_mu_
};

// The one error shape: {"error":{"code","message","request_id"}}.
http::Response ErrorResponse(const Error& e, const std::string& request_id);
http::Response JsonResponse(int status, const Json& body);

// The OpenAPI 3 document (api/openapi.json, embedded at build time).
const std::string& OpenApiDocument();

}  // namespace atrium::api
