// Roles, permissions and the one authorization decision.
//
// Every API route names one Permission (src/api/routes.cc). A role grants a
// permission with a reach: kSelf (objects the principal's own user owns),
// kTenant (anything in the principal's tenant) or kPlatform (any tenant).
// Authorize() is the only place that compares a principal with a target.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace atrium {

enum class Role {
  kPlatformAdmin,
  kPlatformOperator,
  kTenantAdmin,
  kTenantMember,
  kTenantViewer,
};

std::string_view RoleName(Role r);
std::optional<Role> ParseRole(std::string_view name);
bool IsPlatformRole(Role r);
// All roles, for tests that enumerate them.
const std::vector<Role>& AllRoles();
// True if `a` may hand out `b` (a key or a user may never exceed its
// creator): platform-admin ≥ everything; tenant-admin ≥ tenant roles;
// member ≥ member, viewer; viewer ≥ viewer; operator ≥ nothing.
bool RoleCovers(Role a, Role b);

enum class Permission {
  kNone,      // public routes (health, login, OpenAPI document)
  kSelfRead,  // whoami, own session
  kTenantCreate,
  kTenantRead,
  kTenantList,
  kTenantUpdate,
  kTenantSuspend,
  kTenantEvict,
  kUserCreate,
  kUserRead,
  kUserUpdate,
  kUserDelete,
  kKeyCreate,
  kKeyRead,
  kKeyRevoke,
  kAuditRead,
  kSigningKeyRotate,
  kNodeRead,    // nodes, GPUs, free capacity (tenants see only their own allocations)
  kNodeManage,  // cordon, drain, uncordon
  kQuotaRead,
  kQuotaSet,  // a tenant's quota
  kProjectRead,
  kProjectManage,  // projects and their quota split
  kAllocationCreate,
  kAllocationRead,     // allocations and why they wait
  kAllocationRelease,  // kSelf: allocations the caller requested
  kJobCreate,
  kJobRead,           // jobs, their events and why they wait
  kJobCancel,         // kSelf: jobs the caller submitted
  kJobLogRead,        // a job's stdout/stderr: the tenant's own only
  kModelInvoke,       // call models through the gateway (/v1/*)
  kDeploymentRead,    // model deployments (shared ones and the tenant's own)
  kDeploymentManage,  // create, change, delete deployments
  kEntitlementRead,   // which models a tenant may call
  kEntitlementManage,
  kGatewayLimitRead,  // request and token limits of a tenant and its keys
  kGatewayLimitSet,
  kUsageRead,       // usage records and totals
  kTemplateRead,    // environment templates: the platform's and the tenant's own
  kTemplateManage,  // publish and retire environment templates
  kAdapterRead,     // a tenant's LoRA adapters on managed deployments
  kAdapterManage,   // register and delete them
  kPriceRead,       // the platform's price books
  kPriceManage,     // make price books and their versions; the default book
  kBillingRead,     // a tenant's billing plan, drafts and invoices; verify (staff)
  kBillingManage,   // set a tenant's plan, finalise its invoices
  kBudgetManage,    // a tenant's budgets: make, change, delete
};

std::string_view PermissionName(Permission p);

enum class Reach { kNone, kSelf, kTenant, kPlatform };

// How far `role` holds `permission`.
Reach ReachOf(Role role, Permission permission);

// Who is asking. Built only by the authenticator from a verified credential.
struct Principal {
  std::string tenant_id;  // "" for platform staff
  std::string user_id;    // the user or service account
  Role role = Role::kTenantViewer;
  std::string credential;  // "key:<id>" or "session:<id>"
  bool is_service = false;
  std::vector<std::string> scopes;  // API-key scopes (models); empty = all
  int64_t expires_at = 0;           // ms; an API key's own expiry, 0 = never

  bool is_platform() const { return tenant_id.empty(); }
  bool is_api_key() const { return credential.rfind("key:", 0) == 0; }
  // A key narrower than its owner's login: scoped or expiring. Whatever it
  // creates must be as narrow (see IdentityService::CreateApiKey).
  bool is_restricted_key() const { return is_api_key() && (!scopes.empty() || expires_at != 0); }
  std::string actor() const;  // for the audit trail: "user:<id>" or "key:<id>"
};

// What an action touches: the tenant that owns it and, where it has one, the
// user that owns it (a key's owner, or the user itself).
struct Target {
  std::string tenant_id;      // "" when the target is platform-wide
  std::string owner_user_id;  // "" when not owned by one user
};

enum class Decision {
  kAllow,
  kDenyNotFound,   // the target is outside the principal's reach: looks missing
  kDenyForbidden,  // visible but the role does not allow the action
};

Decision Authorize(const Principal& p, Permission perm, const Target& target);

}  // namespace atrium
