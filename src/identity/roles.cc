#include "identity/roles.h"

#include <array>

namespace atrium {
namespace {

struct RoleInfo {
  Role role;
  std::string_view name;
};
constexpr RoleInfo kRoles[] = {
    {Role::kPlatformAdmin, "platform-admin"}, {Role::kPlatformOperator, "platform-operator"},
    {Role::kTenantAdmin, "tenant-admin"},     {Role::kTenantMember, "tenant-member"},
    {Role::kTenantViewer, "tenant-viewer"},
};

struct Grant {
  Permission permission;
  // Reach per role, in kRoles order: admin, operator, t-admin, member, viewer.
  std::array<Reach, 5> reach;
};

constexpr Reach N = Reach::kNone, S = Reach::kSelf, T = Reach::kTenant, P = Reach::kPlatform;

// The permission table. Platform-operator reads everything, changes nothing
// tenants own beyond suspending them, edits only its own profile and
// password, and never sees a secret (secrets are never readable by
// anyone after creation anyway). Tenant roles never reach past their tenant.
// clang-format off
constexpr Grant kGrants[] = {
    //                                 p-admin p-oper t-admin member viewer
    {Permission::kSelfRead,          {{S, S, S, S, S}}},
    {Permission::kTenantCreate,      {{P, N, N, N, N}}},
    {Permission::kTenantRead,        {{P, P, T, T, T}}},
    {Permission::kTenantList,        {{P, P, N, N, N}}},
    {Permission::kTenantUpdate,      {{P, N, N, N, N}}},
    {Permission::kTenantSuspend,     {{P, P, N, N, N}}},
    {Permission::kTenantEvict,       {{P, N, N, N, N}}},
    {Permission::kUserCreate,        {{P, N, T, N, N}}},
    {Permission::kUserRead,          {{P, P, T, T, S}}},
    {Permission::kUserUpdate,        {{P, S, T, S, S}}},
    {Permission::kUserDelete,        {{P, N, T, N, N}}},
    {Permission::kKeyCreate,         {{P, N, T, S, N}}},
    {Permission::kKeyRead,           {{P, P, T, S, S}}},
    {Permission::kKeyRevoke,         {{P, N, T, S, N}}},
    {Permission::kAuditRead,         {{P, P, T, N, N}}},
    {Permission::kSigningKeyRotate,  {{P, N, N, N, N}}},
    {Permission::kNodeRead,          {{P, P, T, T, T}}},
    {Permission::kNodeManage,        {{P, P, N, N, N}}},
    {Permission::kQuotaRead,         {{P, P, T, T, T}}},
    {Permission::kQuotaSet,          {{P, P, N, N, N}}},
    {Permission::kProjectRead,       {{P, P, T, T, T}}},
    {Permission::kProjectManage,     {{P, N, T, N, N}}},
    // The platform admin requests for a tenant it names; the operator
    // only reads and (like the admin) may not change tenants' work.
    {Permission::kAllocationCreate,  {{P, N, T, T, N}}},
    {Permission::kAllocationRead,    {{P, P, T, T, T}}},
    {Permission::kAllocationRelease, {{P, N, T, S, N}}},
    // Jobs run the tenant's code: only its own users submit them; staff
    // read the rows and may cancel; what a job prints stays the tenant's.
    {Permission::kJobCreate,         {{N, N, T, T, N}}},
    {Permission::kJobRead,           {{P, P, T, T, T}}},
    {Permission::kJobCancel,         {{P, N, T, S, N}}},
    {Permission::kJobLogRead,        {{N, N, T, T, T}}},
    // Viewers read; they do not spend the tenant's money on tokens.
    {Permission::kModelInvoke,       {{N, N, T, T, N}}},
    // Shared deployments are the platform's; a tenant admin manages the
    // tenant's dedicated ones.
    {Permission::kDeploymentRead,    {{P, P, T, T, T}}},
    {Permission::kDeploymentManage,  {{P, N, T, N, N}}},
    {Permission::kEntitlementRead,   {{P, P, T, T, T}}},
    {Permission::kEntitlementManage, {{P, N, N, N, N}}},
    {Permission::kGatewayLimitRead,  {{P, P, T, T, T}}},
    // Tenant admins may narrow their own keys; tenant-wide limits are the operator's.
    {Permission::kGatewayLimitSet,   {{P, P, T, N, N}}},
    {Permission::kUsageRead,         {{P, P, T, T, T}}},
    // Everyone reads the templates they may run in; the platform admin
    // publishes the platform's, a tenant admin the tenant's own.
    {Permission::kTemplateRead,      {{P, P, T, T, T}}},
    // Adapters are the tenant's weights, from archives only its own users
    // upload: they register them; staff read the rows.
    {Permission::kAdapterRead,       {{P, P, T, T, T}}},
    {Permission::kAdapterManage,     {{N, N, T, T, N}}},
    {Permission::kTemplateManage,    {{P, N, T, N, N}}},
    // Prices and plans are the platform's commercial terms: its admin sets
    // them, its operators read them. A tenant admin reads the tenant's
    // plan and invoices (spend per project and key); members and viewers
    // do not see money.
    {Permission::kPriceRead,         {{P, P, N, N, N}}},
    {Permission::kPriceManage,       {{P, N, N, N, N}}},
    {Permission::kBillingRead,       {{P, P, T, N, N}}},
    {Permission::kBillingManage,     {{P, N, N, N, N}}},
    {Permission::kBudgetManage,      {{P, N, T, N, N}}},
};
// clang-format on

size_t RoleIndex(Role r) { return static_cast<size_t>(r); }

}  // namespace

std::string_view RoleName(Role r) { return kRoles[RoleIndex(r)].name; }

std::optional<Role> ParseRole(std::string_view name) {
  for (const auto& info : kRoles) {
    if (info.name == name) return info.role;
  }
  return std::nullopt;
}

bool IsPlatformRole(Role r) { return r == Role::kPlatformAdmin || r == Role::kPlatformOperator; }

const std::vector<Role>& AllRoles() {
  static const std::vector<Role> roles = {Role::kPlatformAdmin, Role::kPlatformOperator,
                                          Role::kTenantAdmin, Role::kTenantMember,
                                          Role::kTenantViewer};
  return roles;
}

bool RoleCovers(Role a, Role b) {
  switch (a) {
    case Role::kPlatformAdmin:
      return true;
    case Role::kPlatformOperator:
      return b == Role::kPlatformOperator;
    case Role::kTenantAdmin:
      return !IsPlatformRole(b);
    case Role::kTenantMember:
      return b == Role::kTenantMember || b == Role::kTenantViewer;
    case Role::kTenantViewer:
      return b == Role::kTenantViewer;
  }
  return false;
}

std::string_view PermissionName(Permission p) {
  switch (p) {
    case Permission::kNone:
      return "none";
    case Permission::kSelfRead:
      return "self.read";
    case Permission::kTenantCreate:
      return "tenant.create";
    case Permission::kTenantRead:
      return "tenant.read";
    case Permission::kTenantList:
      return "tenant.list";
    case Permission::kTenantUpdate:
      return "tenant.update";
    case Permission::kTenantSuspend:
      return "tenant.suspend";
    case Permission::kTenantEvict:
      return "tenant.evict";
    case Permission::kUserCreate:
      return "user.create";
    case Permission::kUserRead:
      return "user.read";
    case Permission::kUserUpdate:
      return "user.update";
    case Permission::kUserDelete:
      return "user.delete";
    case Permission::kKeyCreate:
      return "key.create";
    case Permission::kKeyRead:
      return "key.read";
    case Permission::kKeyRevoke:
      return "key.revoke";
    case Permission::kAuditRead:
      return "audit.read";
    case Permission::kSigningKeyRotate:
      return "signing_key.rotate";
    case Permission::kNodeRead:
      return "node.read";
    case Permission::kNodeManage:
      return "node.manage";
    case Permission::kModelInvoke:
      return "model.invoke";
    case Permission::kDeploymentRead:
      return "deployment.read";
    case Permission::kDeploymentManage:
      return "deployment.manage";
    case Permission::kEntitlementRead:
      return "entitlement.read";
    case Permission::kEntitlementManage:
      return "entitlement.manage";
    case Permission::kGatewayLimitRead:
      return "gateway_limit.read";
    case Permission::kGatewayLimitSet:
      return "gateway_limit.set";
    case Permission::kUsageRead:
      return "usage.read";
    case Permission::kTemplateRead:
      return "template.read";
    case Permission::kTemplateManage:
      return "template.manage";
    case Permission::kAdapterRead:
      return "adapter.read";
    case Permission::kAdapterManage:
      return "adapter.manage";
    case Permission::kPriceRead:
      return "price.read";
    case Permission::kPriceManage:
      return "price.manage";
    case Permission::kBillingRead:
      return "billing.read";
    case Permission::kBillingManage:
      return "billing.manage";
    case Permission::kBudgetManage:
      return "budget.manage";
    case Permission::kQuotaRead:
      return "quota.read";
    case Permission::kQuotaSet:
      return "quota.set";
    case Permission::kProjectRead:
      return "project.read";
    case Permission::kProjectManage:
      return "project.manage";
    case Permission::kAllocationCreate:
      return "allocation.create";
    case Permission::kAllocationRead:
      return "allocation.read";
    case Permission::kAllocationRelease:
      return "allocation.release";
    case Permission::kJobCreate:
      return "job.create";
    case Permission::kJobRead:
      return "job.read";
    case Permission::kJobCancel:
      return "job.cancel";
    case Permission::kJobLogRead:
      return "job.log.read";
  }
  return "unknown";
}

Reach ReachOf(Role role, Permission permission) {
  if (permission == Permission::kNone) return Reach::kPlatform;
  for (const auto& g : kGrants) {
    if (g.permission == permission) return g.reach[RoleIndex(role)];
  }
  return Reach::kNone;
}

std::string Principal::actor() const { return credential.empty() ? "anonymous" : credential; }

Decision Authorize(const Principal& p, Permission perm, const Target& target) {
  Reach reach = ReachOf(p.role, perm);
  // Visibility first: a tenant principal never learns that another tenant's
  // object exists, whatever its role.
  if (!p.is_platform() && target.tenant_id != p.tenant_id) return Decision::kDenyNotFound;
  // A tenant role held outside a tenant reaches nothing (it cannot be
  // created; this keeps a bad row from widening into every tenant).
  if (p.is_platform() && !IsPlatformRole(p.role) && perm != Permission::kSelfRead) {
    return Decision::kDenyForbidden;
  }
  switch (reach) {
    case Reach::kPlatform:
    case Reach::kTenant:  // same tenant, checked above
      return Decision::kAllow;
    case Reach::kSelf:
      if (target.owner_user_id == p.user_id) return Decision::kAllow;
      return Decision::kDenyForbidden;
    case Reach::kNone:
      break;
  }
  return Decision::kDenyForbidden;
}

}  // namespace atrium
