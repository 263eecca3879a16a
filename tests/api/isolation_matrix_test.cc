// The isolation matrix: two tenants; every route of the server's own route
// table × every role × a set of scenarios (own tenant's object, the same with
// an access token, the caller's own object, another tenant's object, another
// tenant's object id under the own tenant, no credential, a malformed one, a
// revoked key, an expired key, a suspended tenant) → the answer that the
// table below expects.
//
// The table is written by hand and is independent of the permission table in
// identity/roles.cc: it says what the product promises. The test walks
// ControlPlaneApi::router().routes(), so a route added to routes.cc without a
// row here fails EveryRouteHasARow.
//
// Besides the status, every cell checks that an allowed mutating request
// changed the store and that any other request did not, that audited routes
// appended exactly one record (and a tenant caller's denied probe never lands
// in another tenant's chain), and that another tenant's object answers
// byte-for-byte like an object that does not exist.
#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/api_fixture.h"
#include "billing/period.h"
#include "common/strings.h"
#include "crypto/crypto.h"
#include "crypto/ids.h"

namespace atrium::api {
namespace {

using fixture::Actor;
using fixture::ApiHarness;
using fixture::BodyOf;
using fixture::World;
using fixture::WorldOptions;

enum class Scenario {
  kOwn,        // the role's caller on an object of its own tenant (or the platform's)
  kToken,      // the same with an access token from logging in instead of a key
  kSelf,       // the caller's own user or key
  kOther,      // tenant B's tenant id and objects
  kCross,      // tenant A in the path, tenant B's object id
  kNone,       // no credential
  kBad,        // a key whose text was tampered with
  kRevoked,    // a revoked key of the role's caller
  kExpired,    // an expired key of the role's caller
  kSuspended,  // a key of a user of a suspended tenant, on that tenant's objects
};
constexpr std::array kScenarios = {Scenario::kOwn,      Scenario::kToken,   Scenario::kSelf,
                                   Scenario::kOther,    Scenario::kCross,   Scenario::kNone,
                                   Scenario::kBad,      Scenario::kRevoked, Scenario::kExpired,
                                   Scenario::kSuspended};

const char* NameOf(Scenario s) {
  switch (s) {
    case Scenario::kOwn:
      return "own";
    case Scenario::kToken:
      return "token";
    case Scenario::kSelf:
      return "self";
    case Scenario::kOther:
      return "other";
    case Scenario::kCross:
      return "cross";
    case Scenario::kNone:
      return "none";
    case Scenario::kBad:
      return "bad";
    case Scenario::kRevoked:
      return "revoked";
    case Scenario::kExpired:
      return "expired";
    case Scenario::kSuspended:
      return "suspended";
  }
  return "?";
}

// Scenarios that may legitimately change the store; on destructive routes
// each gets a world of its own.
bool MayMutate(Scenario s) {
  return s == Scenario::kOwn || s == Scenario::kOther || s == Scenario::kSelf;
}

// The model the entitlement rows grant and revoke (not one the world's
// deployments serve, so that the matrix never changes what a tenant sees).
constexpr char kMatrixModel[] = "matrix-model";

// One request of the matrix: where it points and who sends it.
struct Case {
  Role role = Role::kTenantViewer;
  Scenario scenario = Scenario::kOwn;
  const World* world = nullptr;
  std::string tenant_id;                  // for {tenant_id}
  std::string user_id;                    // for {user_id}; also the object a body names
  std::string key_id;                     // for {key_id}
  std::string allocation_id;              // for {allocation_id}
  std::string job_id;                     // for {job_id}
  std::string archive_id;                 // for {archive_id}
  std::string project;                    // for {project}
  std::string node = fixture::kTestNode;  // for {node}
  std::string deployment_id;              // for {deployment_id}
  std::string adapter_id;                 // for {adapter_id}
  std::string book_id;                    // for {book_id}
  std::string invoice_id;                 // for {invoice_id}
  std::string budget_id;                  // for {budget_id}
  std::string model = kMatrixModel;       // for {model}
  std::string template_ref;               // for {template}
  const Actor* caller = nullptr;          // whose identity the request uses (login body, self)
  std::string bearer;
};

using BodyFn = std::function<Json(ApiHarness&, const Case&)>;
using PrepareFn = std::function<void(ApiHarness&, const Case&)>;

// One row of the expectation table. Tokens per role, in the order
// platform-admin, platform-operator, tenant-admin, tenant-member,
// tenant-viewer:
//   "200" ...  that status
//   "200s"     that status, and a list holding only the caller's own objects
//   "m"        exactly what a random, nonexistent id answers (status, code
//              and message): the object's existence does not show
//   "-"        not applicable
struct Row {
  bool authenticated = true;    // false: a public route, credentials ignored
  const char* own = "";         // on an object of the caller's own tenant or platform
  const char* self = nullptr;   // on the caller's own user or key ({user_id}/{key_id} routes)
  const char* other = nullptr;  // on tenant B ({tenant_id} routes) or B's object id
  bool fresh_world = false;     // destructive: fresh throwaway objects per case
  bool session_caller = false;  // "own" authenticates with a fresh login session
  const char* query = "";       // appended to every request of the row
  BodyFn body = nullptr;
  PrepareFn prepare = nullptr;
};

// --- Request bodies: minimal and valid ---

Json LoginBody(ApiHarness&, const Case& c) {
  Json b = {{"username", c.caller->username}, {"password", c.caller->password}};
  if (!c.caller->tenant_name.empty()) b["tenant"] = c.caller->tenant_name;
  return b;
}

Json NewTenantBody(ApiHarness& h, const Case&) { return {{"name", h.UniqueName("new-tenant")}}; }

Json RenameBody(ApiHarness& h, const Case&) { return {{"display_name", h.UniqueName("Renamed")}}; }

BodyFn NewUserBody(const char* role) {
  return [role](ApiHarness& h, const Case&) -> Json {
    return {{"username", h.UniqueName("new-user")}, {"role", role}, {"kind", "service"}};
  };
}

// Tenant roles create keys for themselves; platform staff name a user of the
// tenant (a platform user cannot own a tenant's key).
Json NewTenantKeyBody(ApiHarness& h, const Case& c) {
  Json b = {{"name", h.UniqueName("new-key")}};
  if (IsPlatformRole(c.role)) b["owner_user_id"] = c.user_id;
  return b;
}

Json NewPlatformKeyBody(ApiHarness& h, const Case&) { return {{"name", h.UniqueName("new-key")}}; }

// Resume only changes something on a suspended tenant; platform staff (who
// may resume) get one. Tenant roles, who may not, keep theirs active so that
// their key still authenticates and the 403 shows.
void SuspendFirstForPlatformStaff(ApiHarness& h, const Case& c) {
  if (IsPlatformRole(c.role) && (c.scenario == Scenario::kOwn || c.scenario == Scenario::kOther)) {
    h.SuspendTenant(c.tenant_id);
  }
}

// Each quota or project-split body sets different figures, so every allowed
// request changes the store.
int64_t NextFigure() {
  static int64_t n = 0;
  return ++n;
}

Json TenantQuotaBody(ApiHarness&, const Case&) {
  int64_t milli = 100'000 + NextFigure();
  return {{"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", milli}, {"limit_milli", milli}};
}

Json ProjectQuotaBody(ApiHarness&, const Case&) {
  int64_t milli = NextFigure() % 50'000;
  return {
      {"model", "L40S"}, {"kind", "share"}, {"guarantee_milli", milli}, {"limit_milli", milli + 1}};
}

Json NewProjectBody(ApiHarness& h, const Case&) { return {{"name", h.UniqueName("project")}}; }

Json NewPriceBookBody(ApiHarness& h, const Case&) {
  return {{"name", h.UniqueName("book")},
          {"currency", "EUR"},
          {"entries", Json::parse(R"([{"meter": "tokens.input", "price_minor": "10"}])")}};
}

Json PriceVersionBody(ApiHarness&, const Case&) {
  return {{"entries", Json::parse(R"([{"meter": "gpu.whole", "price_minor": "199"}])")}};
}

Json DefaultBookBody(ApiHarness&, const Case& c) { return {{"price_book", c.world->book_id}}; }

Json VerifyBody(ApiHarness&, const Case&) { return {{"period", "2026-09"}}; }

Json PlanBody(ApiHarness&, const Case& c) {
  return {{"price_book", c.world->book_id}, {"discount_bp", NextFigure() % 10'000}};
}

// The month after the tenant's last final invoice: it has ended, and every
// one before it is final.
Json NextPeriodBody(ApiHarness& h, const Case& c) {
  auto through = h.store().FinalizedThrough(TenantScope::Of(c.tenant_id));
  int64_t at = through.has_value() && *through > 0 ? *through : 1'577'836'800'000;  // 2020-01-01
  return {{"period", billing::PeriodName(billing::PeriodContaining(at, 1))}};
}

// A budget of a project made for it (before the snapshot): one budget per
// project, so each allowed call makes a new one.
Json NewBudgetBody(ApiHarness& h, const Case& c) {
  const std::string project = h.UniqueName("budgeted");
  (void)h.CallJson("POST", "/api/v1/tenants/" + c.tenant_id + "/projects", h.root_key(),
                   {{"name", project}});
  return {{"scope", "project"}, {"subject", project}, {"amount_minor", 1'000'000'000}};
}
Json CreditBody(ApiHarness&, const Case&) {
  return {{"amount_minor", 100 + NextFigure() % 1000}, {"note", "matrix"}};
}
Json BudgetChangeBody(ApiHarness&, const Case&) {
  return {{"amount_minor", 1'000'000'000 + NextFigure() % 1000}};
}

// An archive upload's body: the tar's bytes (sent raw, not as JSON).
Json NewArchiveBody(ApiHarness&, const Case&) { return fixture::SmallArchive(); }

// An adapter on the path's tenant's managed deployment, from its archive.
Json NewAdapterBody(ApiHarness& h, const Case& c) {
  const fixture::TenantSeed& t = c.tenant_id == c.world->other.id       ? c.world->other
                                 : c.tenant_id == c.world->suspended.id ? c.world->suspended
                                                                        : c.world->own;
  return {{"name", h.UniqueName("adapter")},
          {"deployment", t.managed_deployment_id},
          {"artifact", "archive:" + t.archive_id},
          {"sha256", t.archive_sha256}};
}

// Platform staff name the tenant they request for; tenant callers need not.
Json NewJobBody(ApiHarness& h, const Case&) { return fixture::SmallJobBody(h.UniqueName("job")); }

Json NewAllocationBody(ApiHarness&, const Case& c) {
  Json b = fixture::SmallShareBody();
  if (IsPlatformRole(c.role)) b["tenant_id"] = c.tenant_id;
  return b;
}

// Cordon, drain and uncordon change something only from the other state.
// GPU health changes something only from the other state; the body marks
// it healthy, so the matrix's node keeps taking work for the rows after.
void MarkGpuUnhealthyFirst(ApiHarness& h, const Case& c) {
  (void)h.scheduling().SetGpuHealth(RequestOrigin{}, c.node, 0, false);
}
// The next version of the world's templates (names stay on their side:
// a tenant's name is never the platform's).
Json TenantTemplateBody(ApiHarness&, const Case&) {
  return {{"name", "tenant-env"}, {"rootfs_digest", "sha256:" + std::string(64, 'e')}};
}
Json PlatformTemplateBody(ApiHarness&, const Case&) {
  return {{"name", "platform-env"}, {"rootfs_digest", "sha256:" + std::string(64, 'e')}};
}

Json GpuHealthBody(ApiHarness&, const Case&) {
  return {{"healthy", true}, {"reason", "isolation matrix"}};
}
void UncordonFirst(ApiHarness& h, const Case& c) {
  (void)h.scheduling().Uncordon(RequestOrigin{}, c.node);
}
void CordonFirst(ApiHarness& h, const Case& c) {
  (void)h.scheduling().Cordon(RequestOrigin{}, c.node);
}

// Platform staff create shared deployments; a tenant admin its tenant's
// dedicated ones (the tenant comes from the credential). Each on a server
// of its own: a shared deployment's endpoint is never a tenant's.
Json NewDeploymentBody(ApiHarness& h, const Case&) {
  static int next_port = 8000;
  return {{"model", h.UniqueName("model")},
          {"endpoints", {{{"url", "http://10.0.0.7:" + std::to_string(next_port++)}}}},
          {"region", "local"}};
}

Json DeploymentChangeBody(ApiHarness& h, const Case&) { return {{"version", h.UniqueName("v")}}; }
Json ScaleBody(ApiHarness&, const Case&) { return {{"replicas", 1}}; }

// Granting and revoking change something only from the other state.
// A deleted budget is made again, under its id, for the next cell.
void RestoreBudgetFirst(ApiHarness& h, const Case& c) {
  const World& w = *c.world;
  std::string owner;
  for (const auto* t : {&w.own, &w.other, &w.suspended}) {
    if (t->budget_id == c.budget_id) owner = t->id;
  }
  if (owner.empty()) return;  // a missing id stays missing
  auto had = h.store().GetBudget(TenantScope::Of(owner), c.budget_id);
  if (had.has_value()) return;
  BudgetRecord b;
  b.id = c.budget_id;
  b.scope = "project";
  b.subject = "research";
  b.currency = "USD";
  b.amount_minor = 1'000'000'000;
  b.thresholds = {50, 80, 100};
  (void)h.store().CreateBudget(TenantScope::Of(owner), b);
}

void RevokeMatrixModelFirst(ApiHarness& h, const Case& c) {
  (void)h.store().RevokeEntitlement(TenantScope::Of(c.tenant_id), c.model);
}
void GrantMatrixModelFirst(ApiHarness& h, const Case& c) {
  (void)h.store().GrantEntitlement(TenantScope::Of(c.tenant_id), c.model, 1);
}

// Tenant-wide limits far above any key's, so a key's stay within them.
Json TenantLimitBody(ApiHarness&, const Case&) {
  return {{"requests_per_minute", 1'000'000 + NextFigure()},
          {"tokens_per_minute", 0},
          {"max_concurrent", 0},
          {"max_queued", 0}};
}

Json KeyLimitBody(ApiHarness&, const Case&) {
  return {{"requests_per_minute", 1 + NextFigure() % 100'000},
          {"tokens_per_minute", 0},
          {"max_concurrent", 0},
          {"max_queued", 0}};
}

// THE TABLE. A new route needs a row here: what each role may do.
const std::map<std::string, Row>& Expectations() {
  static const auto* table = new std::map<std::string, Row>{
      // Public routes: the same answer whatever the credential.
      {"GET /healthz", {.authenticated = false, .own = "200 200 200 200 200"}},
      {"GET /readyz", {.authenticated = false, .own = "200 200 200 200 200"}},
      {"GET /api/v1/openapi.json", {.authenticated = false, .own = "200 200 200 200 200"}},
      {"POST /api/v1/auth/login",
       {.authenticated = false, .own = "200 200 200 200 200", .body = LoginBody}},

      // The caller itself.
      {"POST /api/v1/auth/logout", {.own = "204 204 204 204 204", .session_caller = true}},
      {"GET /api/v1/whoami", {.own = "200 200 200 200 200"}},
      {"POST /api/v1/auth/signing-keys/rotate", {.own = "200 403 403 403 403"}},

      // Tenants: operators onboard and manage them; tenants read their own.
      {"POST /api/v1/tenants", {.own = "201 403 403 403 403", .body = NewTenantBody}},
      {"GET /api/v1/tenants", {.own = "200 200 403 403 403"}},
      {"GET /api/v1/tenants/{tenant_id}", {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"PATCH /api/v1/tenants/{tenant_id}",
       {.own = "200 403 403 403 403", .other = "200 403 m m m", .body = RenameBody}},
      {"POST /api/v1/tenants/{tenant_id}/suspend",
       {.own = "200 200 403 403 403", .other = "200 200 m m m", .fresh_world = true}},
      {"POST /api/v1/tenants/{tenant_id}/resume",
       {.own = "200 200 403 403 403",
        .other = "200 200 m m m",
        .fresh_world = true,
        .prepare = SuspendFirstForPlatformStaff}},
      {"POST /api/v1/tenants/{tenant_id}/evict",
       {.own = "200 403 403 403 403", .other = "200 403 m m m", .fresh_world = true}},

      // A tenant's users: admins manage them, members read them, viewers
      // see only themselves; everyone may edit their own profile.
      {"POST /api/v1/tenants/{tenant_id}/users",
       {.own = "201 403 201 403 403",
        .other = "201 403 m m m",
        .body = NewUserBody("tenant-viewer")}},
      {"GET /api/v1/tenants/{tenant_id}/users",
       {.own = "200 200 200 200 200s", .other = "200 200 m m m", .query = "?limit=1000"}},
      {"GET /api/v1/tenants/{tenant_id}/users/{user_id}",
       {.own = "200 200 200 200 403", .self = "- - 200 200 200", .other = "200 200 m m m"}},
      {"PATCH /api/v1/tenants/{tenant_id}/users/{user_id}",
       {.own = "200 403 200 403 403",
        .self = "- - 200 200 200",
        .other = "200 403 m m m",
        .body = RenameBody}},
      {"DELETE /api/v1/tenants/{tenant_id}/users/{user_id}",
       {.own = "204 403 204 403 403",
        .self = "- - 409 403 403",
        .other = "204 403 m m m",
        .fresh_world = true}},

      // A tenant's keys: admins manage all, members their own, viewers read
      // their own.
      {"POST /api/v1/tenants/{tenant_id}/keys",
       {.own = "201 403 201 201 403", .other = "201 403 m m m", .body = NewTenantKeyBody}},
      {"GET /api/v1/tenants/{tenant_id}/keys",
       {.own = "200 200 200 200s 200s", .other = "200 200 m m m", .query = "?limit=1000"}},
      {"GET /api/v1/tenants/{tenant_id}/keys/{key_id}",
       {.own = "200 200 200 403 403", .self = "- - 200 200 200", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/keys/{key_id}/revoke",
       {.own = "200 403 200 403 403",
        .self = "- - 200 200 403",
        .other = "200 403 m m m",
        .fresh_world = true}},

      // The platform's own staff and keys: invisible to tenants.
      {"POST /api/v1/platform/users",
       {.own = "201 403 404 404 404", .body = NewUserBody("platform-operator")}},
      {"GET /api/v1/platform/users", {.own = "200 200 404 404 404", .query = "?limit=1000"}},
      {"GET /api/v1/platform/users/{user_id}",
       {.own = "200 200 404 404 404", .self = "200 200 - - -", .other = "m m m m m"}},
      {"PATCH /api/v1/platform/users/{user_id}",
       {.own = "200 403 404 404 404",
        .self = "200 200 - - -",
        .other = "m m m m m",
        .body = RenameBody}},
      {"DELETE /api/v1/platform/users/{user_id}",
       {.own = "204 403 404 404 404",
        .self = "409 403 - - -",
        .other = "m m m m m",
        .fresh_world = true}},
      {"POST /api/v1/platform/keys", {.own = "201 403 404 404 404", .body = NewPlatformKeyBody}},
      {"GET /api/v1/platform/keys", {.own = "200 200 404 404 404", .query = "?limit=1000"}},
      {"GET /api/v1/platform/keys/{key_id}",
       {.own = "200 200 404 404 404", .self = "200 200 - - -", .other = "m m m m m"}},
      {"POST /api/v1/platform/keys/{key_id}/revoke",
       {.own = "200 403 404 404 404",
        .self = "200 403 - - -",
        .other = "m m m m m",
        .fresh_world = true}},

      // The audit trail: tenant admins read their own chain, operators all.
      {"GET /api/v1/tenants/{tenant_id}/audit",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"GET /api/v1/audit", {.own = "200 200 403 403 403"}},
      {"GET /api/v1/tenants/{tenant_id}/audit/heads",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"GET /api/v1/audit/heads", {.own = "200 200 403 403 403"}},

      // The fleet: everyone reads it (tenants see only their own
      // allocations on it); operators cordon and drain nodes and set GPU
      // health.
      {"GET /api/v1/nodes", {.own = "200 200 200 200 200"}},
      {"GET /api/v1/nodes/{node}", {.own = "200 200 200 200 200"}},
      {"POST /api/v1/nodes/{node}/cordon",
       {.own = "200 200 403 403 403", .prepare = UncordonFirst}},
      {"POST /api/v1/nodes/{node}/drain", {.own = "200 200 403 403 403", .prepare = UncordonFirst}},
      {"POST /api/v1/nodes/{node}/uncordon",
       {.own = "200 200 403 403 403", .prepare = CordonFirst}},
      {"PUT /api/v1/nodes/{node}/gpus/{gpu}/health",
       {.own = "200 200 403 403 403", .body = GpuHealthBody, .prepare = MarkGpuUnhealthyFirst}},
      {"GET /api/v1/gpus", {.own = "200 200 200 200 200"}},
      {"GET /api/v1/capacity", {.own = "200 200 200 200 200"}},

      // Quotas: operators set them, the tenant reads them; tenant admins
      // split them among projects.
      {"GET /api/v1/tenants/{tenant_id}/quotas",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/quotas",
       {.own = "200 200 403 403 403", .other = "200 200 m m m", .body = TenantQuotaBody}},
      {"GET /api/v1/tenants/{tenant_id}/projects",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/projects",
       {.own = "201 403 201 403 403", .other = "201 403 m m m", .body = NewProjectBody}},
      {"GET /api/v1/tenants/{tenant_id}/projects/{project}",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/projects/{project}/quotas",
       {.own = "200 403 200 403 403", .other = "200 403 m m m", .body = ProjectQuotaBody}},
      {"DELETE /api/v1/tenants/{tenant_id}/projects/{project}/quotas/{model}/{kind}",
       {.own = "200 403 200 403 403", .other = "200 403 m m m", .fresh_world = true}},
      {"DELETE /api/v1/tenants/{tenant_id}/projects/{project}",
       {.own = "204 403 204 403 403", .other = "204 403 m m m", .fresh_world = true}},

      // Allocations run as the caller's tenant: members request them and
      // release their own, admins release any of the tenant's; platform
      // staff read all, and the platform admin requests (naming the
      // tenant) and releases any.
      {"POST /api/v1/allocations", {.own = "201 403 201 201 403", .body = NewAllocationBody}},
      {"GET /api/v1/allocations", {.own = "200 200 200 200 200"}},
      {"GET /api/v1/allocations/{allocation_id}",
       {.own = "200 200 200 200 200", .self = "- - 200 200 -", .other = "200 200 m m m"}},
      {"DELETE /api/v1/allocations/{allocation_id}",
       {.own = "200 403 200 403 403",
        .self = "- - 200 200 -",
        .other = "200 403 m m m",
        .fresh_world = true}},
      {"GET /api/v1/allocations/{allocation_id}/why",
       {.own = "200 200 200 200 200", .self = "- - 200 200 -", .other = "200 200 m m m"}},

      // Jobs run the tenant's code as the caller's tenant: only its own
      // admins and members submit them; members cancel their own, admins
      // any of the tenant's; platform staff read them (env values hidden)
      // and the platform admin cancels any, but nobody outside the tenant
      // reads a job's logs. A cancel of a running job answers 202 (stopping).
      {"POST /api/v1/jobs", {.own = "403 403 201 201 403", .body = NewJobBody}},
      {"GET /api/v1/jobs", {.own = "200 200 200 200 200"}},
      {"GET /api/v1/jobs/{job_id}",
       {.own = "200 200 200 200 200", .self = "- - 200 200 -", .other = "200 200 m m m"}},
      {"POST /api/v1/jobs/{job_id}/cancel",
       {.own = "202 403 202 403 403",
        .self = "- - 202 202 -",
        .other = "202 403 m m m",
        .fresh_world = true}},
      {"GET /api/v1/jobs/{job_id}/events",
       {.own = "200 200 200 200 200", .self = "- - 200 200 -", .other = "200 200 m m m"}},
      {"GET /api/v1/jobs/{job_id}/logs",
       {.own = "403 403 200 200 200", .self = "- - 200 200 -", .other = "403 403 m m m"}},
      {"GET /api/v1/jobs/{job_id}/why",
       {.own = "200 200 200 200 200", .self = "- - 200 200 -", .other = "200 200 m m m"}},
      // Job archives are the inputs of the tenant's jobs: those who submit
      // jobs (its admins and members) upload, read and delete them; staff
      // and viewers do not, and another tenant's id is a missing one.
      {"POST /api/v1/jobs/archives", {.own = "403 403 201 201 403", .body = NewArchiveBody}},
      {"GET /api/v1/jobs/archives", {.own = "403 403 200 200 403"}},
      {"GET /api/v1/jobs/archives/{archive_id}",
       {.own = "403 403 200 200 403", .self = "- - 200 200 -", .other = "403 403 m m m"}},
      {"DELETE /api/v1/jobs/archives/{archive_id}",
       {.own = "403 403 204 204 403",
        .self = "- - 204 204 -",
        .other = "403 403 m m m",
        .fresh_world = true}},

      // LoRA adapters are the tenant's weights, from its own archives:
      // those who upload archives (its admins and members) register and
      // delete them; everyone of the tenant and platform staff read them;
      // another tenant's adapter is a missing one.
      {"POST /api/v1/tenants/{tenant_id}/adapters",
       {.own = "403 403 201 201 403", .other = "403 403 m m m", .body = NewAdapterBody}},
      {"GET /api/v1/tenants/{tenant_id}/adapters",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/adapters/{adapter_id}",
       {.own = "200 200 200 200 200", .self = "- - - - -", .other = "200 200 m m m"}},
      {"DELETE /api/v1/tenants/{tenant_id}/adapters/{adapter_id}",
       {.own = "403 403 204 204 403",
        .self = "- - - - -",
        .other = "403 403 m m m",
        .fresh_world = true}},

      // Billing: prices are the platform admin's to set and its staff's to
      // read; a tenant admin reads the tenant's plan and invoices (members
      // and viewers do not see money); only the platform admin sets plans
      // and finalises. Another tenant's plan or invoice is a missing one.
      {"POST /api/v1/price-books", {.own = "201 403 403 403 403", .body = NewPriceBookBody}},
      {"GET /api/v1/price-books", {.own = "200 200 403 403 403"}},
      // Price books are the platform's, like nodes: no tenant owns one.
      {"GET /api/v1/price-books/{book_id}", {.own = "200 200 403 403 403"}},
      {"POST /api/v1/price-books/{book_id}/versions",
       {.own = "201 403 403 403 403", .body = PriceVersionBody}},
      {"GET /api/v1/billing/default-price-book", {.own = "200 200 403 403 403"}},
      {"PUT /api/v1/billing/default-price-book",
       {.own = "201 403 403 403 403", .body = DefaultBookBody}},
      {"POST /api/v1/billing/verify", {.own = "200 200 403 403 403", .body = VerifyBody}},
      {"GET /api/v1/tenants/{tenant_id}/billing/plan",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/billing/plan",
       {.own = "201 403 403 403 403", .other = "201 403 m m m", .body = PlanBody}},
      {"GET /api/v1/tenants/{tenant_id}/invoices",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/invoices/draft",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/invoices/finalize",
       {.own = "201 403 403 403 403", .other = "201 403 m m m", .body = NextPeriodBody}},
      {"GET /api/v1/tenants/{tenant_id}/invoices/{invoice_id}",
       {.own = "200 200 200 403 403", .self = "- - - - -", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/invoices/{invoice_id}/csv",
       {.own = "200 200 200 403 403", .self = "- - - - -", .other = "200 200 m m m"}},
      // Credits: granted by the platform admin, read with the billing.
      {"GET /api/v1/tenants/{tenant_id}/credits",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/credits",
       {.own = "201 403 403 403 403", .other = "201 403 m m m", .body = CreditBody}},
      // Budgets: read with the billing; made and changed by the platform
      // admin and the tenant's admins.
      {"GET /api/v1/tenants/{tenant_id}/budgets",
       {.own = "200 200 200 403 403", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/budgets",
       {.own = "201 403 201 403 403", .other = "201 403 m m m", .body = NewBudgetBody}},
      {"GET /api/v1/tenants/{tenant_id}/budgets/{budget_id}",
       {.own = "200 200 200 403 403", .self = "- - - - -", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/budgets/{budget_id}",
       {.own = "200 403 200 403 403",
        .self = "- - - - -",
        .other = "200 403 m m m",
        .body = BudgetChangeBody}},
      {"DELETE /api/v1/tenants/{tenant_id}/budgets/{budget_id}",
       {.own = "204 403 204 403 403",
        .self = "- - - - -",
        .other = "204 403 m m m",
        .prepare = RestoreBudgetFirst}},

      // Model deployments: platform staff manage every one (shared ones
      // included); a tenant admin its tenant's dedicated ones; everyone
      // reads what the tenant may use. "own" is tenant A's dedicated one.
      {"POST /api/v1/deployments", {.own = "201 403 201 403 403", .body = NewDeploymentBody}},
      {"GET /api/v1/deployments", {.own = "200 200 200 200 200"}},
      {"GET /api/v1/deployments/{deployment_id}",
       {.own = "200 200 200 200 200", .self = "- - - - -", .other = "200 200 m m m"}},
      {"PATCH /api/v1/deployments/{deployment_id}",
       {.own = "200 403 200 403 403",
        .self = "- - - - -",
        .other = "200 403 m m m",
        .body = DeploymentChangeBody}},
      // Scaling and listing replicas: the matrix's deployment is external,
      // so whoever gets past authorization hears it has no replicas (409).
      {"POST /api/v1/deployments/{deployment_id}/scale",
       {.own = "409 403 409 403 403",
        .self = "- - - - -",
        .other = "409 403 m m m",
        .body = ScaleBody}},
      {"GET /api/v1/deployments/{deployment_id}/replicas",
       {.own = "409 409 409 409 409", .self = "- - - - -", .other = "409 409 m m m"}},
      {"DELETE /api/v1/deployments/{deployment_id}",
       {.own = "204 403 204 403 403",
        .self = "- - - - -",
        .other = "204 403 m m m",
        .fresh_world = true}},

      // Entitlements: the platform admin grants them; the tenant reads its own.
      {"GET /api/v1/tenants/{tenant_id}/entitlements",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/entitlements/{model}",
       {.own = "200 403 403 403 403", .other = "200 403 m m m", .prepare = RevokeMatrixModelFirst}},
      {"DELETE /api/v1/tenants/{tenant_id}/entitlements/{model}",
       {.own = "204 403 403 403 403", .other = "204 403 m m m", .prepare = GrantMatrixModelFirst}},

      // Gateway limits: operators set the tenant-wide row; a tenant admin
      // narrows the tenant's keys; everyone in the tenant reads them.
      {"GET /api/v1/tenants/{tenant_id}/gateway-limits",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"PUT /api/v1/tenants/{tenant_id}/gateway-limits",
       {.own = "200 200 403 403 403", .other = "200 200 m m m", .body = TenantLimitBody}},
      {"PUT /api/v1/tenants/{tenant_id}/keys/{key_id}/gateway-limits",
       {.own = "200 200 200 403 403",
        .self = "- - 200 403 403",
        .other = "200 200 m m m",
        .body = KeyLimitBody}},

      // Environment templates: everyone reads the platform's and the
      // tenant's own; a tenant admin publishes and retires the tenant's,
      // the platform admin the platform's (and, naming it, a tenant's).
      // Another tenant's answers like one that does not exist.
      {"GET /api/v1/tenants/{tenant_id}/environment-templates",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"POST /api/v1/tenants/{tenant_id}/environment-templates",
       {.own = "201 403 201 403 403", .other = "201 403 m m m", .body = TenantTemplateBody}},
      {"GET /api/v1/tenants/{tenant_id}/environment-templates/{template}",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"DELETE /api/v1/tenants/{tenant_id}/environment-templates/{template}",
       {.own = "200 403 200 403 403", .other = "200 403 m m m", .fresh_world = true}},
      {"GET /api/v1/platform/environment-templates", {.own = "200 200 404 404 404"}},
      {"POST /api/v1/platform/environment-templates",
       {.own = "201 403 404 404 404", .body = PlatformTemplateBody}},
      {"GET /api/v1/platform/environment-templates/{template}", {.own = "200 200 404 404 404"}},
      {"DELETE /api/v1/platform/environment-templates/{template}",
       {.own = "200 403 404 404 404", .fresh_world = true}},

      // Usage: everyone in the tenant reads the tenant's; nobody else's.
      {"GET /api/v1/tenants/{tenant_id}/usage",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/usage/summary",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/usage/refusals",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/usage/gpu",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
      {"GET /api/v1/tenants/{tenant_id}/usage/gpu/summary",
       {.own = "200 200 200 200 200", .other = "200 200 m m m"}},
  };
  return *table;
}

std::vector<std::string> Tokens(const char* s) {
  std::vector<std::string> out;
  std::istringstream in(s ? s : "");
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

struct Shape {
  bool has_tenant = false;  // {tenant_id}
  bool has_object = false;  // {user_id} or {key_id}
  bool platform = false;    // /api/v1/platform/...
  bool user_list = false;   // GET .../users
  bool key_list = false;    // GET .../keys
};

Shape ShapeOf(const std::string& method, const std::string& pattern) {
  Shape s;
  s.has_tenant = pattern.find("{tenant_id}") != std::string::npos;
  s.has_object = pattern.find("{user_id}") != std::string::npos ||
                 pattern.find("{key_id}") != std::string::npos ||
                 pattern.find("{allocation_id}") != std::string::npos ||
                 pattern.find("{job_id}") != std::string::npos ||
                 pattern.find("{archive_id}") != std::string::npos ||
                 pattern.find("{deployment_id}") != std::string::npos ||
                 pattern.find("{adapter_id}") != std::string::npos ||
                 pattern.find("{invoice_id}") != std::string::npos ||
                 pattern.find("{budget_id}") != std::string::npos;
  s.platform = StartsWith(pattern, "/api/v1/platform/");
  auto ends_with = [&](std::string_view suffix) {
    return pattern.size() >= suffix.size() &&
           pattern.compare(pattern.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  s.user_list = method == "GET" && ends_with("/users");
  s.key_list = method == "GET" && ends_with("/keys");
  return s;
}

// The expected token for one cell, or "-".
std::string ExpectedToken(const Row& row, const Shape& shape, size_t role_index, Role role,
                          Scenario sc) {
  auto at = [&](const char* column) -> std::string {
    auto t = Tokens(column);
    return role_index < t.size() ? t[role_index] : "-";
  };
  std::string own = at(row.own);
  switch (sc) {
    case Scenario::kOwn:
      return own;
    case Scenario::kToken:
      return (!row.authenticated || row.fresh_world || row.session_caller) ? "-" : own;
    case Scenario::kSelf:
      return row.authenticated && row.self ? at(row.self) : "-";
    case Scenario::kOther:
      return row.authenticated && row.other ? at(row.other) : "-";
    case Scenario::kCross:
      return row.authenticated && shape.has_tenant && shape.has_object ? "m" : "-";
    case Scenario::kNone:
    case Scenario::kBad:
    case Scenario::kRevoked:
    case Scenario::kExpired:
      return row.authenticated ? "401" : own;
    case Scenario::kSuspended:
      if (IsPlatformRole(role)) return "-";
      return row.authenticated ? "401" : own;
  }
  return "-";
}

std::string Expand(const std::string& pattern, const Case& c) {
  std::string out = pattern;
  auto sub = [&](const std::string& name, const std::string& value) {
    for (auto pos = out.find(name); pos != std::string::npos; pos = out.find(name)) {
      out.replace(pos, name.size(), value);
    }
  };
  sub("{tenant_id}", c.tenant_id);
  sub("{user_id}", c.user_id);
  sub("{key_id}", c.key_id);
  sub("{allocation_id}", c.allocation_id);
  sub("{job_id}", c.job_id);
  sub("{archive_id}", c.archive_id);
  sub("{project}", c.project);
  sub("{node}", c.node);
  sub("{gpu}", "0");
  sub("{deployment_id}", c.deployment_id);
  sub("{adapter_id}", c.adapter_id);
  sub("{book_id}", c.book_id);
  sub("{invoice_id}", c.invoice_id);
  sub("{budget_id}", c.budget_id);
  // A project's quota row: the class the world's project has a row for.
  sub("/quotas/{model}/{kind}", "/quotas/L40S/share");
  sub("{model}", c.model);
  sub("{template}", c.template_ref);
  return out;
}

// A key text with its last character changed: the checksum no longer fits.
std::string Tampered(std::string key) {
  key.back() = key.back() == 'A' ? 'B' : 'A';
  return key;
}

const Actor& CallerOf(const World& w, Role role) {
  return IsPlatformRole(role) ? w.platform.at(role) : w.own.members.at(role);
}

Case MakeCase(ApiHarness& h, const Row& row, const Shape& shape, Role role, Scenario sc,
              const World& w) {
  Case c;
  c.role = role;
  c.scenario = sc;
  c.world = &w;
  c.caller = &CallerOf(w, role);
  c.bearer = c.caller->key;
  c.tenant_id = w.own.id;
  const Actor& object = shape.platform ? w.platform_object : w.own.object;
  c.user_id = object.user_id;
  c.key_id = object.key_id;
  c.allocation_id = w.own.allocation_id;
  c.job_id = w.own.job_id;
  c.archive_id = w.own.archive_id;
  c.project = w.own.project;
  c.deployment_id = w.own.deployment_id;
  c.adapter_id = w.own.adapter_id;
  c.book_id = w.book_id;
  c.invoice_id = w.own.invoice_id;
  c.budget_id = w.own.budget_id;
  c.template_ref = shape.platform ? w.platform_template_ref : w.own.template_ref;
  switch (sc) {
    case Scenario::kOwn:
      if (row.session_caller) c.bearer = h.Login(*c.caller);
      break;
    case Scenario::kToken:
      c.bearer = h.Login(*c.caller);
      break;
    case Scenario::kSelf:
      c.user_id = c.caller->user_id;
      c.key_id = c.caller->key_id;
      c.allocation_id = c.caller->allocation_id;
      c.job_id = c.caller->job_id;
      break;
    case Scenario::kOther:
      if (shape.has_tenant) c.tenant_id = w.other.id;
      c.user_id = w.other.object.user_id;
      c.key_id = w.other.object.key_id;
      c.allocation_id = w.other.allocation_id;
      c.job_id = w.other.job_id;
      c.archive_id = w.other.archive_id;
      c.project = w.other.project;
      c.deployment_id = w.other.deployment_id;
      c.adapter_id = w.other.adapter_id;
      c.invoice_id = w.other.invoice_id;
      c.budget_id = w.other.budget_id;
      if (!shape.platform) c.template_ref = w.other.template_ref;
      break;
    case Scenario::kCross:
      c.user_id = w.other.object.user_id;
      c.key_id = w.other.object.key_id;
      c.allocation_id = w.other.allocation_id;
      c.job_id = w.other.job_id;
      c.archive_id = w.other.archive_id;
      c.adapter_id = w.other.adapter_id;
      c.invoice_id = w.other.invoice_id;
      c.budget_id = w.other.budget_id;
      break;
    case Scenario::kNone:
      c.bearer = "";
      break;
    case Scenario::kBad:
      c.bearer = Tampered(c.caller->key);
      break;
    case Scenario::kRevoked:
      c.bearer = w.revoked_key.at(role);
      break;
    case Scenario::kExpired:
      c.bearer = w.expired_key.at(role);
      break;
    case Scenario::kSuspended: {
      const Actor& suspended = w.suspended.members.at(role);
      c.bearer = suspended.key;
      if (!row.authenticated) break;  // public: only the credential differs
      c.caller = &suspended;
      c.tenant_id = w.suspended.id;
      if (!shape.platform) {
        c.user_id = w.suspended.object.user_id;
        c.key_id = w.suspended.object.key_id;
        c.allocation_id = w.suspended.allocation_id;
        c.job_id = w.suspended.job_id;
        c.archive_id = w.suspended.archive_id;
        c.project = w.suspended.project;
        c.deployment_id = w.suspended.deployment_id;
        c.adapter_id = w.suspended.adapter_id;
        c.invoice_id = w.suspended.invoice_id;
        c.budget_id = w.suspended.budget_id;
        c.template_ref = w.suspended.template_ref;
      }
      break;
    }
  }
  return c;
}

// The same request with ids that exist nowhere: a random tenant (unless the
// case keeps its own tenant on purpose) and random objects.
Case MissingVariant(ApiHarness& h, const Case& c, const Shape& shape) {
  Case m = c;
  if (shape.has_tenant && c.scenario != Scenario::kCross) m.tenant_id = NewId("tn", h.clock());
  m.user_id = NewId("usr", h.clock());
  m.key_id = crypto::RandomBase62(12);
  m.allocation_id = NewId("alloc", h.clock());
  m.job_id = NewId("job", h.clock());
  m.archive_id = NewId("arc", h.clock());
  m.project = h.UniqueName("no-such-project");
  m.node = h.UniqueName("no-such-node");
  m.deployment_id = NewId("dep", h.clock());
  m.adapter_id = NewId("ad", h.clock());
  m.book_id = NewId("pb", h.clock());
  m.invoice_id = NewId("inv", h.clock());
  m.budget_id = NewId("bud", h.clock());
  m.template_ref = h.UniqueName("no-such-template") + "@1";
  return m;
}

std::string Placeholders(size_t n, size_t first = 1) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ",";
    out += "$" + std::to_string(first + i);
  }
  return out;
}

// What the store holds about the tenants and platform objects a case can
// touch, plus global row counts (which catch a row created anywhere else).
// The audit trail is left out: every audited request appends to it.
std::string Snapshot(Store& store, const std::vector<std::string>& tenant_ids,
                     const std::vector<std::string>& platform_user_ids) {
  auto& db = store.database();
  std::string out;
  auto dump = [&](const std::string& sql, const std::vector<sql::Value>& params) {
    auto rows = db.Exec(sql, params);
    if (!rows.has_value()) {
      out += "ERROR " + rows.error().message + "\n";
      return;
    }
    for (const auto& r : rows->rows) {
      for (const auto& col : r.columns) out += (col ? *col : "NULL") + "|";
      out += "\n";
    }
  };
  dump(
      "SELECT (SELECT COUNT(*) FROM tenants), (SELECT COUNT(*) FROM tenant_labels), "
      "(SELECT COUNT(*) FROM users), (SELECT COUNT(*) FROM api_keys), "
      "(SELECT COUNT(*) FROM sessions), (SELECT COUNT(*) FROM signing_keys), "
      "(SELECT COUNT(*) FROM allocations), (SELECT COUNT(*) FROM quotas), "
      "(SELECT COUNT(*) FROM projects), (SELECT COUNT(*) FROM deployments), "
      "(SELECT COUNT(*) FROM entitlements), (SELECT COUNT(*) FROM gateway_limits), "
      "(SELECT COUNT(*) FROM usage_records), (SELECT COUNT(*) FROM jobs), "
      "(SELECT COUNT(*) FROM job_events), (SELECT COUNT(*) FROM environment_templates), "
      "(SELECT COUNT(*) FROM job_archives), (SELECT COUNT(*) FROM job_runs), "
      "(SELECT COUNT(*) FROM adapters), (SELECT COUNT(*) FROM price_books), "
      "(SELECT COUNT(*) FROM price_book_versions), (SELECT COUNT(*) FROM billing_plans), "
      "(SELECT COUNT(*) FROM invoices), (SELECT COUNT(*) FROM billing_accounts), "
      "(SELECT COUNT(*) FROM rated_usage), (SELECT COUNT(*) FROM credit_grants), "
      "(SELECT COUNT(*) FROM budgets)",
      {});
  std::vector<sql::Value> tenants(tenant_ids.begin(), tenant_ids.end());
  std::string in = Placeholders(tenants.size());
  dump("SELECT * FROM tenants WHERE id IN (" + in + ") ORDER BY id", tenants);
  for (const char* table : {"users", "api_keys", "sessions", "allocations", "jobs", "job_archives",
                            "adapters", "budgets"}) {
    dump(std::string("SELECT * FROM ") + table + " WHERE tenant_id IN (" + in + ") ORDER BY id",
         tenants);
  }
  dump("SELECT * FROM job_runs WHERE tenant_id IN (" + in + ") ORDER BY job_id, attempt", tenants);
  dump("SELECT * FROM quotas WHERE tenant_id IN (" + in + ") ORDER BY tenant_id, project, model",
       tenants);
  dump("SELECT * FROM projects WHERE tenant_id IN (" + in + ") ORDER BY tenant_id, name", tenants);
  // Deployments: the tenants' and the shared ones (few: one per world).
  dump("SELECT * FROM deployments WHERE tenant_id = '' OR tenant_id IN (" + in + ") ORDER BY id",
       tenants);
  dump("SELECT * FROM entitlements WHERE tenant_id IN (" + in + ") ORDER BY tenant_id, model",
       tenants);
  dump("SELECT * FROM gateway_limits WHERE tenant_id IN (" + in + ") ORDER BY tenant_id, key_id",
       tenants);
  dump("SELECT * FROM environment_templates WHERE tenant_id = '' OR tenant_id IN (" + in +
           ") ORDER BY tenant_id, name, version",
       tenants);
  dump("SELECT name, cordoned, draining FROM fleet_nodes ORDER BY name", {});
  dump("SELECT node, idx, healthy FROM fleet_gpus ORDER BY node, idx", {});
  std::vector<sql::Value> platform(platform_user_ids.begin(), platform_user_ids.end());
  std::string pin = Placeholders(platform.size());
  dump("SELECT * FROM users WHERE tenant_id = '' AND id IN (" + pin + ") ORDER BY id", platform);
  dump("SELECT * FROM api_keys WHERE tenant_id = '' AND owner_user_id IN (" + pin + ") ORDER BY id",
       platform);
  dump("SELECT id FROM signing_keys ORDER BY id", {});
  return out;
}

int64_t MaxAuditSeq(Store& store) {
  auto rows = store.database().Exec("SELECT COALESCE(MAX(seq), 0) FROM audit_log", {});
  return rows.has_value() && !rows->rows.empty() ? rows->rows[0].Int(0) : -1;
}

struct AuditRow {
  std::string request_id, action, outcome, tenant_id;
};

// The API's own records: the scheduler's decision records ("scheduler.*")
// and the job service's transitions ("jobs.*") that a request may cause
// come on top and are checked by the API tests, as
// do the summaries of earlier minutes' unauthenticated refusals that a
// request may flush (audit/denial_tally.h).
std::vector<AuditRow> AuditAfter(Store& store, int64_t seq) {
  std::vector<AuditRow> out;
  auto rows = store.database().Exec(
      "SELECT request_id, action, outcome, tenant_id FROM audit_log WHERE seq > $1 AND action NOT "
      "LIKE 'scheduler.%' AND action NOT LIKE 'jobs.%' AND NOT (actor = 'anonymous' AND target "
      "LIKE 'unauthenticated: %') "
      "ORDER BY seq",
      {seq});
  if (!rows.has_value()) return out;
  for (const auto& r : rows->rows) out.push_back({r.Text(0), r.Text(1), r.Text(2), r.Text(3)});
  return out;
}

struct Sent {
  int status = 0;
  std::string code, message;
  Json body;
  std::string target;
  std::vector<std::string> problems;  // state or audit expectations broken
};

Sent Send(ApiHarness& h, const ApiRouter::Route& route, const Row& row, const Case& c) {
  Sent s;
  s.target = Expand(route.pattern, c) + row.query;
  Json body = row.body ? row.body(h, c) : Json(nullptr);
  const World& w = *c.world;
  std::vector<std::string> tenants = {c.tenant_id, w.own.id, w.other.id};
  if (!w.suspended.id.empty()) tenants.push_back(w.suspended.id);
  std::vector<std::string> platform_users = {w.platform_object.user_id, c.user_id};
  for (const auto& [role, actor] : w.platform) platform_users.push_back(actor.user_id);

  std::string before = Snapshot(h.store(), tenants, platform_users);
  int64_t seq = MaxAuditSeq(h.store());
  const int64_t counted_before = h.api().unauthenticated_denials();
  // An upload's body is the file itself.
  http::Response r = route.payload.takes_upload && body.is_string()
                         ? h.Call(route.method, s.target, c.bearer, body.get<std::string>(),
                                  {.content_type = "application/x-tar"})
                         : h.CallJson(route.method, s.target, c.bearer, body);
  const int64_t counted = h.api().unauthenticated_denials() - counted_before;
  std::string request_id = h.last_request_id();
  std::string after = Snapshot(h.store(), tenants, platform_users);

  s.status = r.status;
  s.body = BodyOf(r);
  if (s.body.is_object() && s.body.contains("error")) {
    s.code = s.body["error"].value("code", "");
    s.message = s.body["error"].value("message", "");
  }
  bool ok = r.status >= 200 && r.status < 300;
  const std::string& action = route.payload.audit_action;
  if (ok && !action.empty()) {
    if (before == after) s.problems.push_back("allowed, but the store did not change");
  } else if (before != after) {
    s.problems.push_back(std::string(ok ? "a read" : "denied") + ", but the store changed");
  }
  auto records = AuditAfter(h.store(), seq);
  if (action.empty()) {
    if (!records.empty()) s.problems.push_back("a read appended an audit record");
    if (counted != 0) s.problems.push_back("a read was counted as an audited refusal");
  } else if (counted != 0 || (c.bearer.empty() && !ok)) {
    // Refused before a principal existed: counted for the minute's summary
    // record, never appended one by one (anyone could flood the trail).
    if (ok) s.problems.push_back("an allowed request was only counted, not recorded");
    if (counted != 1) s.problems.push_back("a refusal without a credential was not counted");
    if (!records.empty()) {
      s.problems.push_back("an unauthenticated refusal appended " + std::to_string(records.size()) +
                           " audit record(s)");
    }
  } else if (records.size() != 1 || records[0].request_id != request_id) {
    s.problems.push_back("expected exactly one audit record for " + request_id + ", got " +
                         std::to_string(records.size()));
  } else {
    const AuditRow& a = records[0];
    if (a.action != action) s.problems.push_back("audit action " + a.action + " != " + action);
    std::string want_outcome = ok                                     ? "allowed"
                               : (r.status == 401 || r.status == 403) ? "denied"
                                                                      : "";
    if (!want_outcome.empty() && a.outcome != want_outcome) {
      s.problems.push_back("audit outcome " + a.outcome + ", expected " + want_outcome);
    }
    if (!ok && !a.tenant_id.empty() && c.caller && !IsPlatformRole(c.role) &&
        a.tenant_id != c.caller->tenant_id) {
      s.problems.push_back("a tenant caller's refused request was audited in tenant " +
                           a.tenant_id + "'s chain");
    }
  }
  return s;
}

// Checks a 2xx list: "self only" lists hold just the caller's objects; full
// lists include the object the case points at.
std::string CheckList(const Sent& s, const Shape& shape, const Case& c, bool self_only) {
  if (!shape.user_list && !shape.key_list) return "";
  if (!s.body.is_object() || !s.body.contains("items") || !s.body["items"].is_array()) {
    return "no items array";
  }
  const Json& items = s.body["items"];
  if (self_only) {
    if (items.empty()) return "a self-only list is empty";
    for (const auto& item : items) {
      const std::string& owner =
          shape.user_list ? item.value("id", "") : item.value("owner_user_id", "");
      if (owner != c.caller->user_id) return "a self-only list shows " + item.value("id", "");
    }
    return "";
  }
  const std::string& want = shape.user_list ? c.user_id : c.key_id;
  for (const auto& item : items) {
    if (item.value("id", "") == want) return "";
  }
  return "the list lacks " + want;
}

WorldOptions FreshWorldOptions(Role role, bool bad_credentials) {
  WorldOptions o;
  o.roles = {role};
  o.other_members = false;
  o.bad_credentials = bad_credentials;
  o.humans = false;
  return o;
}

std::string RouteKey(const ApiRouter::Route& r) { return r.method + " " + r.pattern; }

class IsolationMatrixTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    harness_ = new ApiHarness();
    world_ = new World(harness_->BuildWorld());
  }
  static void TearDownTestSuite() {
    delete world_;
    delete harness_;
    world_ = nullptr;
    harness_ = nullptr;
  }
  static ApiHarness* harness_;
  static World* world_;
};
ApiHarness* IsolationMatrixTest::harness_ = nullptr;
World* IsolationMatrixTest::world_ = nullptr;

TEST_F(IsolationMatrixTest, EveryRouteHasARow) {
  const auto& table = Expectations();
  std::set<std::string> seen;
  for (const auto& route : harness_->api().router().routes()) {
    std::string key = RouteKey(route);
    seen.insert(key);
    auto it = table.find(key);
    if (it == table.end()) {
      ADD_FAILURE() << "route '" << key << "' (\"" << route.payload.summary
                    << "\") has no row in the isolation matrix. Add one to Expectations() in "
                       "tests/api/isolation_matrix_test.cc saying what each role may do on "
                       "its own tenant's objects, on its own objects and on another tenant's.";
      continue;
    }
    const Row& row = it->second;
    Shape shape = ShapeOf(route.method, route.pattern);
    EXPECT_EQ(Tokens(row.own).size(), AllRoles().size()) << key << ": own needs one token per role";
    EXPECT_EQ(row.authenticated, route.payload.target != TargetKind::kPublic)
        << key << ": the table and the route disagree on whether it is public";
    if (shape.has_object) {
      EXPECT_TRUE(row.self && row.other) << key << ": a route on one object needs self and other";
    }
    if (shape.has_tenant) {
      EXPECT_TRUE(row.other) << key << ": a tenant route needs other";
    }
    if (!shape.has_tenant && !shape.has_object) {
      EXPECT_FALSE(row.self || row.other) << key << ": self/other need an id in the path";
    }
    for (const char* column : {row.self, row.other}) {
      if (column) {
        EXPECT_EQ(Tokens(column).size(), AllRoles().size()) << key;
      }
    }
    // Tenant roles never tell another tenant's object from a missing one.
    if (row.other) {
      auto other = Tokens(row.other);
      for (size_t i = 0; i < AllRoles().size() && i < other.size(); ++i) {
        if (!IsPlatformRole(AllRoles()[i])) {
          EXPECT_EQ(other[i], "m") << key << ": tenant roles must see other tenants as missing";
        }
      }
    }
  }
  for (const auto& [key, row] : table) {
    EXPECT_TRUE(seen.count(key)) << "the matrix has a row for '" << key
                                 << "', which is not in the route table any more";
  }
}

struct Cell {
  std::string expected;
  std::string actual = "-";
  bool ok = true;
};

TEST_F(IsolationMatrixTest, EveryRouteEveryRoleEveryScenario) {
  ApiHarness& h = *harness_;
  const auto& roles = AllRoles();
  const auto& routes = h.api().router().routes();
  // cells[route][role][scenario]
  std::vector<std::vector<std::array<Cell, kScenarios.size()>>> cells(
      routes.size(), std::vector<std::array<Cell, kScenarios.size()>>(roles.size()));
  std::vector<std::string> failures;
  size_t checked = 0;

  for (size_t ri = 0; ri < routes.size(); ++ri) {
    const auto& route = routes[ri];
    auto it = Expectations().find(RouteKey(route));
    if (it == Expectations().end()) continue;  // EveryRouteHasARow reports it
    const Row& row = it->second;
    Shape shape = ShapeOf(route.method, route.pattern);
    for (size_t oi = 0; oi < roles.size(); ++oi) {
      Role role = roles[oi];
      std::optional<World> shared_fresh;  // the non-mutating scenarios of a destructive route
      for (size_t si = 0; si < kScenarios.size(); ++si) {
        Scenario sc = kScenarios[si];
        Cell& cell = cells[ri][oi][si];
        cell.expected = ExpectedToken(row, shape, oi, role, sc);
        if (cell.expected == "-") continue;
        ++checked;
        const World* world = world_;
        std::optional<World> own_fresh;
        if (row.fresh_world) {
          if (MayMutate(sc)) {
            own_fresh = h.BuildWorld(FreshWorldOptions(role, false));
            world = &*own_fresh;
          } else {
            if (!shared_fresh) shared_fresh = h.BuildWorld(FreshWorldOptions(role, true));
            world = &*shared_fresh;
          }
        }
        Case c = MakeCase(h, row, shape, role, sc, *world);
        if (row.prepare) row.prepare(h, c);
        Sent got = Send(h, route, row, c);
        cell.actual = std::to_string(got.status);
        std::vector<std::string> why = got.problems;
        if (cell.expected == "m") {
          Sent missing = Send(h, route, row, MissingVariant(h, c, shape));
          for (const auto& p : missing.problems) why.push_back("(missing-id request) " + p);
          if (got.status < 400) why.push_back("answered " + cell.actual + " instead of refusing");
          if (got.status != missing.status || got.code != missing.code ||
              got.message != missing.message) {
            why.push_back("differs from a missing id: " + std::to_string(got.status) + " " +
                          got.code + " '" + got.message + "' vs " + std::to_string(missing.status) +
                          " " + missing.code + " '" + missing.message + "' (" + missing.target +
                          ")");
          }
        } else {
          bool self_only = cell.expected.back() == 's';
          int want = std::stoi(cell.expected);
          if (got.status != want) {
            why.push_back("expected " + std::to_string(want) + ", got " + cell.actual);
          } else if (want == 200) {
            std::string list = CheckList(got, shape, c, self_only);
            if (!list.empty()) why.push_back(list);
          }
        }
        if (!why.empty()) {
          cell.ok = false;
          std::string line = RouteKey(route) + " | " + std::string(RoleName(role)) + " | " +
                             NameOf(sc) + " | " + got.target + ": ";
          for (const auto& w : why) line += w + "; ";
          failures.push_back(line + "body: " + got.body.dump().substr(0, 300));
        }
      }
    }
  }

  size_t total = routes.size() * roles.size() * kScenarios.size();
  std::cout << "isolation matrix: " << routes.size() << " routes x " << roles.size() << " roles x "
            << kScenarios.size() << " scenarios = " << total << " cells, " << checked
            << " applicable and checked, " << failures.size() << " failed\n";

  if (!failures.empty()) {
    std::ostringstream table;
    table << std::left << std::setw(58) << "route" << std::setw(18) << "role";
    for (Scenario sc : kScenarios) table << std::setw(10) << NameOf(sc);
    table << "\n";
    for (size_t ri = 0; ri < routes.size(); ++ri) {
      for (size_t oi = 0; oi < roles.size(); ++oi) {
        table << std::setw(58) << (oi == 0 ? RouteKey(routes[ri]) : "") << std::setw(18)
              << RoleName(roles[oi]);
        for (size_t si = 0; si < kScenarios.size(); ++si) {
          const Cell& cell = cells[ri][oi][si];
          std::string text = cell.actual;
          if (!cell.ok) text += "!" + cell.expected;
          table << std::setw(10) << text;
        }
        table << "\n";
      }
    }
    std::ostringstream list;
    for (size_t i = 0; i < failures.size() && i < 60; ++i) list << "  " << failures[i] << "\n";
    if (failures.size() > 60) list << "  ... and " << failures.size() - 60 << " more\n";
    ADD_FAILURE() << failures.size() << " cells of the isolation matrix failed (cell text: "
                  << "actual status, then !expected):\n"
                  << table.str() << "\nFailures:\n"
                  << list.str();
  }
  EXPECT_TRUE(h.error_shape_violations().empty())
      << "error answers without the common error shape, e.g. "
      << h.error_shape_violations().front();
}

}  // namespace
}  // namespace atrium::api
