#include "identity/roles.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace atrium {
namespace {

std::vector<Permission> AllPermissions() {
  std::vector<Permission> all;
  for (int p = static_cast<int>(Permission::kNone); p <= static_cast<int>(Permission::kUsageRead);
       ++p) {
    all.push_back(static_cast<Permission>(p));
  }
  return all;
}

// Permissions that need a signed-in principal (every one but kNone).
std::vector<Permission> ProtectedPermissions() {
  std::vector<Permission> all = AllPermissions();
  all.erase(all.begin());
  return all;
}

const std::vector<Role> kTenantRoles = {Role::kTenantAdmin, Role::kTenantMember,
                                        Role::kTenantViewer};

Principal TenantPrincipal(Role role, const std::string& tenant = "tn_a",
                          const std::string& user = "usr_me") {
  Principal p;
  p.tenant_id = tenant;
  p.user_id = user;
  p.role = role;
  p.credential = "session:ses_1";
  return p;
}

Principal PlatformPrincipal(Role role) { return TenantPrincipal(role, "", "usr_staff"); }

TEST(RolesTest, NamesRoundTrip) {
  std::set<std::string_view> names;
  for (Role r : AllRoles()) {
    names.insert(RoleName(r));
    auto parsed = ParseRole(RoleName(r));
    ASSERT_TRUE(parsed.has_value()) << RoleName(r);
    EXPECT_EQ(*parsed, r);
  }
  EXPECT_EQ(names.size(), 5u);
  EXPECT_EQ(RoleName(Role::kPlatformAdmin), "platform-admin");
  EXPECT_EQ(RoleName(Role::kTenantViewer), "tenant-viewer");
  for (const char* bad : {"", "admin", "Platform-Admin", "tenant-admin ", "root"}) {
    EXPECT_FALSE(ParseRole(bad).has_value()) << bad;
  }
  EXPECT_TRUE(IsPlatformRole(Role::kPlatformAdmin));
  EXPECT_TRUE(IsPlatformRole(Role::kPlatformOperator));
  for (Role r : kTenantRoles) EXPECT_FALSE(IsPlatformRole(r)) << RoleName(r);
}

TEST(RolesTest, PermissionNamesAreDistinct) {
  std::set<std::string_view> names;
  for (Permission p : AllPermissions()) {
    EXPECT_NE(PermissionName(p), "unknown");
    names.insert(PermissionName(p));
  }
  EXPECT_EQ(names.size(), AllPermissions().size());
}

TEST(RolesTest, TenantRolesNeverReachPastTheirTenant) {
  for (Role r : kTenantRoles) {
    for (Permission p : ProtectedPermissions()) {
      EXPECT_NE(ReachOf(r, p), Reach::kPlatform) << RoleName(r) << " " << PermissionName(p);
    }
    // Platform-wide actions are out of a tenant role's reach entirely.
    for (Permission p :
         {Permission::kTenantCreate, Permission::kTenantList, Permission::kTenantUpdate,
          Permission::kTenantSuspend, Permission::kTenantEvict, Permission::kSigningKeyRotate}) {
      EXPECT_EQ(ReachOf(r, p), Reach::kNone) << RoleName(r) << " " << PermissionName(p);
    }
  }
}

TEST(RolesTest, CapacityPermissions) {
  // Operators run the fleet and set quotas; tenant admins split them.
  for (Role r : {Role::kPlatformAdmin, Role::kPlatformOperator}) {
    EXPECT_EQ(ReachOf(r, Permission::kNodeManage), Reach::kPlatform);
    EXPECT_EQ(ReachOf(r, Permission::kQuotaSet), Reach::kPlatform);
  }
  EXPECT_EQ(ReachOf(Role::kPlatformOperator, Permission::kAllocationCreate), Reach::kNone);
  for (Role r : kTenantRoles) {
    EXPECT_EQ(ReachOf(r, Permission::kNodeManage), Reach::kNone);
    EXPECT_EQ(ReachOf(r, Permission::kQuotaSet), Reach::kNone);
    EXPECT_EQ(ReachOf(r, Permission::kAllocationRead), Reach::kTenant);
  }
  EXPECT_EQ(ReachOf(Role::kTenantAdmin, Permission::kProjectManage), Reach::kTenant);
  EXPECT_EQ(ReachOf(Role::kTenantMember, Permission::kProjectManage), Reach::kNone);
  EXPECT_EQ(ReachOf(Role::kTenantMember, Permission::kAllocationCreate), Reach::kTenant);
  EXPECT_EQ(ReachOf(Role::kTenantMember, Permission::kAllocationRelease), Reach::kSelf);
  EXPECT_EQ(ReachOf(Role::kTenantViewer, Permission::kAllocationCreate), Reach::kNone);
  EXPECT_EQ(ReachOf(Role::kPlatformOperator, Permission::kAllocationRelease), Reach::kNone);
  // Jobs run a tenant's code: only its own users submit them, and what they
  // print is the tenant's alone.
  EXPECT_EQ(ReachOf(Role::kPlatformAdmin, Permission::kJobCreate), Reach::kNone);
  EXPECT_EQ(ReachOf(Role::kTenantMember, Permission::kJobCreate), Reach::kTenant);
  EXPECT_EQ(ReachOf(Role::kTenantMember, Permission::kJobCancel), Reach::kSelf);
  EXPECT_EQ(ReachOf(Role::kPlatformAdmin, Permission::kJobLogRead), Reach::kNone);
  EXPECT_EQ(ReachOf(Role::kPlatformOperator, Permission::kJobLogRead), Reach::kNone);
  EXPECT_EQ(ReachOf(Role::kTenantViewer, Permission::kJobLogRead), Reach::kTenant);
}

TEST(RolesTest, PlatformOperatorChangesNothing) {
  for (Permission p :
       {Permission::kTenantCreate, Permission::kTenantUpdate, Permission::kTenantEvict,
        Permission::kUserCreate, Permission::kUserDelete, Permission::kKeyCreate,
        Permission::kKeyRevoke, Permission::kSigningKeyRotate}) {
    EXPECT_EQ(ReachOf(Role::kPlatformOperator, p), Reach::kNone) << PermissionName(p);
  }
  // Only its own profile and password.
  EXPECT_EQ(ReachOf(Role::kPlatformOperator, Permission::kUserUpdate), Reach::kSelf);
  // It reads across tenants.
  for (Permission p : {Permission::kTenantRead, Permission::kTenantList, Permission::kUserRead,
                       Permission::kKeyRead, Permission::kAuditRead}) {
    EXPECT_EQ(ReachOf(Role::kPlatformOperator, p), Reach::kPlatform) << PermissionName(p);
  }
}

TEST(RolesTest, PlatformAdminReachesEverything) {
  for (Permission p : ProtectedPermissions()) {
    Reach reach = ReachOf(Role::kPlatformAdmin, p);
    if (p == Permission::kSelfRead) {
      EXPECT_EQ(reach, Reach::kSelf);
    } else if (p == Permission::kModelInvoke) {
      // Calling models spends a tenant's money: only tenant users do it.
      EXPECT_EQ(reach, Reach::kNone);
    } else if (p == Permission::kJobCreate || p == Permission::kJobLogRead) {
      // Jobs run a tenant's code, and what they print is the tenant's alone
      // (issue 18: logs readable by the tenant only).
      EXPECT_EQ(reach, Reach::kNone) << PermissionName(p);
    } else {
      EXPECT_EQ(reach, Reach::kPlatform) << PermissionName(p);
    }
  }
}

// Roles are ordered: a role that covers another holds every permission at
// least as far as the covered one (within the tenant roles).
TEST(RolesTest, HigherTenantRolesReachAtLeastAsFar) {
  for (Role a : kTenantRoles) {
    for (Role b : kTenantRoles) {
      if (!RoleCovers(a, b)) continue;
      for (Permission p : AllPermissions()) {
        EXPECT_GE(static_cast<int>(ReachOf(a, p)), static_cast<int>(ReachOf(b, p)))
            << RoleName(a) << " covers " << RoleName(b) << " but not for " << PermissionName(p);
      }
    }
  }
}

TEST(RolesTest, PublicRoutesAreOpenToEveryRole) {
  for (Role r : AllRoles()) EXPECT_EQ(ReachOf(r, Permission::kNone), Reach::kPlatform);
}

TEST(RolesTest, RoleCoversRules) {
  const std::vector<Role>& all = AllRoles();
  for (Role b : all) {
    EXPECT_TRUE(RoleCovers(Role::kPlatformAdmin, b)) << RoleName(b);
    EXPECT_EQ(RoleCovers(Role::kPlatformOperator, b), b == Role::kPlatformOperator) << RoleName(b);
    EXPECT_EQ(RoleCovers(Role::kTenantAdmin, b), !IsPlatformRole(b)) << RoleName(b);
    EXPECT_EQ(RoleCovers(Role::kTenantMember, b),
              b == Role::kTenantMember || b == Role::kTenantViewer)
        << RoleName(b);
    EXPECT_EQ(RoleCovers(Role::kTenantViewer, b), b == Role::kTenantViewer) << RoleName(b);
  }
  // Every role covers itself; no tenant role covers a platform role.
  for (Role a : all) EXPECT_TRUE(RoleCovers(a, a)) << RoleName(a);
  for (Role a : kTenantRoles) {
    EXPECT_FALSE(RoleCovers(a, Role::kPlatformAdmin));
    EXPECT_FALSE(RoleCovers(a, Role::kPlatformOperator));
  }
  // Covering is transitive.
  for (Role a : all) {
    for (Role b : all) {
      for (Role c : all) {
        if (RoleCovers(a, b) && RoleCovers(b, c)) {
          EXPECT_TRUE(RoleCovers(a, c))
              << RoleName(a) << " > " << RoleName(b) << " > " << RoleName(c);
        }
      }
    }
  }
}

// Whatever the role and the permission, another tenant's object (or a
// platform-wide one) looks missing to a tenant principal.
TEST(AuthorizeTest, OtherTenantsTargetsAreNotFoundForEveryPermission) {
  for (Role r : AllRoles()) {
    Principal p = TenantPrincipal(r);
    for (Permission perm : AllPermissions()) {
      for (const Target& t : {Target{"tn_b", ""}, Target{"tn_b", "usr_me"},
                              Target{"tn_b", "usr_other"}, Target{"", ""}, Target{"", "usr_me"},
                              Target{"tn_a_suffix", "usr_me"}, Target{"TN_A", ""}}) {
        EXPECT_EQ(Authorize(p, perm, t), Decision::kDenyNotFound)
            << RoleName(r) << " " << PermissionName(perm) << " on '" << t.tenant_id << "'/'"
            << t.owner_user_id << "'";
      }
    }
  }
}

TEST(AuthorizeTest, InsideTheTenantTheReachDecides) {
  const Target own_tenant{"tn_a", ""};
  const Target own_object{"tn_a", "usr_me"};
  const Target colleagues_object{"tn_a", "usr_other"};
  for (Role r : kTenantRoles) {
    Principal p = TenantPrincipal(r);
    for (Permission perm : ProtectedPermissions()) {
      SCOPED_TRACE(std::string(RoleName(r)) + " " + std::string(PermissionName(perm)));
      switch (ReachOf(r, perm)) {
        case Reach::kTenant:
          EXPECT_EQ(Authorize(p, perm, own_tenant), Decision::kAllow);
          EXPECT_EQ(Authorize(p, perm, colleagues_object), Decision::kAllow);
          EXPECT_EQ(Authorize(p, perm, own_object), Decision::kAllow);
          break;
        case Reach::kSelf:
          EXPECT_EQ(Authorize(p, perm, own_object), Decision::kAllow);
          EXPECT_EQ(Authorize(p, perm, colleagues_object), Decision::kDenyForbidden);
          EXPECT_EQ(Authorize(p, perm, own_tenant), Decision::kDenyForbidden);
          break;
        case Reach::kNone:
          EXPECT_EQ(Authorize(p, perm, own_tenant), Decision::kDenyForbidden);
          EXPECT_EQ(Authorize(p, perm, own_object), Decision::kDenyForbidden);
          break;
        case Reach::kPlatform:
          ADD_FAILURE() << "tenant role with platform reach";
          break;
      }
    }
  }
  // Spot checks of the table.
  EXPECT_EQ(Authorize(TenantPrincipal(Role::kTenantMember), Permission::kKeyCreate, own_object),
            Decision::kAllow);
  EXPECT_EQ(
      Authorize(TenantPrincipal(Role::kTenantMember), Permission::kKeyRevoke, colleagues_object),
      Decision::kDenyForbidden);
  EXPECT_EQ(Authorize(TenantPrincipal(Role::kTenantViewer), Permission::kKeyCreate, own_object),
            Decision::kDenyForbidden);
  EXPECT_EQ(
      Authorize(TenantPrincipal(Role::kTenantAdmin), Permission::kUserDelete, colleagues_object),
      Decision::kAllow);
  EXPECT_EQ(Authorize(TenantPrincipal(Role::kTenantAdmin), Permission::kTenantUpdate, own_tenant),
            Decision::kDenyForbidden);
  EXPECT_EQ(Authorize(TenantPrincipal(Role::kTenantMember), Permission::kAuditRead, own_tenant),
            Decision::kDenyForbidden);
}

TEST(AuthorizeTest, PlatformStaffReachAnyTenantAsFarAsTheirRoleAllows) {
  Principal admin = PlatformPrincipal(Role::kPlatformAdmin);
  Principal op = PlatformPrincipal(Role::kPlatformOperator);
  for (const Target& t : {Target{"tn_a", ""}, Target{"tn_b", "usr_x"}, Target{"", ""}}) {
    for (Permission perm : ProtectedPermissions()) {
      if (perm == Permission::kSelfRead) continue;
      if (perm == Permission::kModelInvoke || perm == Permission::kJobCreate ||
          perm == Permission::kJobLogRead) {
        // No platform role calls models, submits a tenant's jobs or reads
        // their logs (see PlatformAdminReachesEverything).
        EXPECT_EQ(Authorize(admin, perm, t), Decision::kDenyForbidden);
        EXPECT_EQ(Authorize(op, perm, t), Decision::kDenyForbidden);
        continue;
      }
      EXPECT_EQ(Authorize(admin, perm, t), Decision::kAllow) << PermissionName(perm);
      Decision expected = ReachOf(Role::kPlatformOperator, perm) == Reach::kPlatform
                              ? Decision::kAllow
                              : Decision::kDenyForbidden;
      EXPECT_EQ(Authorize(op, perm, t), expected) << PermissionName(perm);
    }
  }
  EXPECT_EQ(Authorize(op, Permission::kTenantEvict, {"tn_a", ""}), Decision::kDenyForbidden);
  EXPECT_EQ(Authorize(op, Permission::kTenantSuspend, {"tn_a", ""}), Decision::kAllow);
  EXPECT_EQ(Authorize(admin, Permission::kSelfRead, {"", "usr_staff"}), Decision::kAllow);
  EXPECT_EQ(Authorize(admin, Permission::kSelfRead, {"", "usr_other"}), Decision::kDenyForbidden);
}

TEST(PrincipalTest, ActorNamesTheCredential) {
  Principal p = TenantPrincipal(Role::kTenantMember);
  EXPECT_EQ(p.actor(), "session:ses_1");
  EXPECT_FALSE(p.is_platform());
  p.credential = "";
  EXPECT_EQ(p.actor(), "anonymous");
  EXPECT_TRUE(PlatformPrincipal(Role::kPlatformAdmin).is_platform());
}

}  // namespace
}  // namespace atrium
