// What the scheduler knows of a tenant: isolation tier, fair-share weight,
// where it may run, whether it is suspended, and its quotas per resource
// class, optionally split among projects. The shell builds these from the
// tenant records and hands them over with Scheduler::SetTenant.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "scheduler/allocation.h"

namespace atrium::sched {

// shared: may share GPUs (shares, MIG) and nodes with other shared tenants;
// dedicated-gpu: never shares a physical GPU with another tenant;
// dedicated-node: never shares a node with another tenant;
// dedicated-pool: runs only in pools dedicated to it.
enum class IsolationTier { kShared, kDedicatedGpu, kDedicatedNode, kDedicatedPool };
std::string_view TierName(IsolationTier tier);  // "shared", "dedicated-gpu", ...
Result<IsolationTier> ParseTier(std::string_view name);

// In milli-GPU of the class's model. guarantee ≤ limit. Usage up to the
// guarantee is the tenant's own; usage between guarantee and limit is
// borrowed, allowed only to preemptible work, and reclaimable.
struct Quota {
  int64_t guarantee = 0;
  int64_t limit = 0;
  bool operator==(const Quota&) const = default;
};

using QuotaTable = std::map<ResourceClass, Quota>;

struct TenantPolicy {
  std::string id;
  IsolationTier tier = IsolationTier::kShared;
  double weight = 1.0;               // fair-share weight, > 0
  std::vector<std::string> regions;  // empty: every region
  std::vector<std::string> pools;    // empty: every pool that admits the tenant
  bool suspended = false;
  // A class absent from the table has guarantee = limit = 0: the tenant may
  // not use it at all.
  QuotaTable quotas;
  // One level of split, by the tenant admin. A project's classes are limited
  // by both its own quota and the tenant's; a class absent from a project's
  // table is limited by the tenant's quota only. For each class the
  // projects' guarantees sum to at most the tenant's guarantee, and each
  // project limit is at most the tenant's limit.
  std::map<std::string, QuotaTable> projects;

  const Quota* QuotaFor(const ResourceClass& rc) const;
  const Quota* ProjectQuotaFor(std::string_view project, const ResourceClass& rc) const;
  bool AllowsRegion(std::string_view region) const;
  bool AllowsPool(std::string_view pool) const;
  bool operator==(const TenantPolicy&) const = default;
};

// Upper bounds on what a tenant policy may hold.
inline constexpr size_t kMaxQuotaClasses = 256;
inline constexpr size_t kMaxProjects = 1024;

// OK, or InvalidArgument naming the first problem: empty id, non-positive or
// non-finite weight, negative quota, limit below guarantee, project
// guarantees summing above the tenant's, a project limit above the tenant's,
// an empty project name, a table over the limits.
Status ValidateTenantPolicy(const TenantPolicy& policy);

// The projects' split as the scheduler enforces it when the operator has
// lowered or removed the tenant's quota below what the tenant admin split
// (the operator's change wins; the admin's rows are kept as they set them,
// so raising the tenant's quota again restores their split). Per class,
// with T the tenant's quota (absent: 0/0):
//  - each project limit is clamped to T.limit, and its guarantee to the
//    clamped limit;
//  - when the guarantees then sum above T.guarantee, each is scaled to
//    floor(g × T.guarantee / Σg), so they sum to at most T.guarantee
//    (deterministic; the rounding goes to nobody).
// A split that already holds is returned unchanged. The result always
// passes ValidateTenantPolicy's split rules.
struct EffectiveSplit {
  TenantPolicy policy;  // the requested policy with the projects' figures clamped
  // Project → classes whose figures were lowered, for telling the tenant
  // admin ("over-committed").
  std::map<std::string, std::vector<ResourceClass>> clamped;
};
EffectiveSplit ClampProjectSplit(TenantPolicy requested);

// Whether a tenant admin may set project `project`'s class `rc` to `next`
// (nullopt: remove the row, back to "limited by the tenant only") in the
// split `requested` (the admin's rows as stored). OK when the split that
// results, with the other projects at their effective (clamped) figures,
// passes ValidateTenantPolicy, or when the change raises nothing (a lower
// or equal guarantee and limit than the project has now, a removed row
// counting as guarantee 0 and the tenant's limit): an over-committed split
// can always be shrunk. InvalidArgument naming the project otherwise.
Status ValidateProjectChange(const TenantPolicy& requested, const std::string& project,
                             const ResourceClass& rc, const std::optional<Quota>& next);

// Whether tenants a and b may hold work on the same physical GPU (shares and
// MIG instances): the same tenant, or both of tier shared.
bool MayShareGpu(std::string_view a, IsolationTier tier_a, std::string_view b,
                 IsolationTier tier_b);

}  // namespace atrium::sched
