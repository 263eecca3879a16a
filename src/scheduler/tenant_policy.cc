#include "scheduler/tenant_policy.h"

#include <algorithm>
#include <cmath>

namespace atrium::sched {

std::string_view TierName(IsolationTier tier) {
  switch (tier) {
    case IsolationTier::kShared:
      return "shared";
    case IsolationTier::kDedicatedGpu:
      return "dedicated-gpu";
    case IsolationTier::kDedicatedNode:
      return "dedicated-node";
    case IsolationTier::kDedicatedPool:
      return "dedicated-pool";
  }
  return "?";
}

Result<IsolationTier> ParseTier(std::string_view name) {
  for (IsolationTier t : {IsolationTier::kShared, IsolationTier::kDedicatedGpu,
                          IsolationTier::kDedicatedNode, IsolationTier::kDedicatedPool}) {
    if (TierName(t) == name) return t;
  }
  return Error::InvalidArgument("unknown isolation tier \"" + std::string(name) +
                                "\" (known: shared, dedicated-gpu, dedicated-node, "
                                "dedicated-pool)");
}

const Quota* TenantPolicy::QuotaFor(const ResourceClass& rc) const {
  auto it = quotas.find(rc);
  return it == quotas.end() ? nullptr : &it->second;
}

const Quota* TenantPolicy::ProjectQuotaFor(std::string_view project,
                                           const ResourceClass& rc) const {
  if (project.empty()) return nullptr;
  auto p = projects.find(std::string(project));
  if (p == projects.end()) return nullptr;
  auto it = p->second.find(rc);
  return it == p->second.end() ? nullptr : &it->second;
}

bool TenantPolicy::AllowsRegion(std::string_view region) const {
  return regions.empty() || std::find(regions.begin(), regions.end(), region) != regions.end();
}

bool TenantPolicy::AllowsPool(std::string_view pool) const {
  return pools.empty() || std::find(pools.begin(), pools.end(), pool) != pools.end();
}

namespace {

Status ValidateTable(const QuotaTable& table, const std::string& owner) {
  if (table.size() > kMaxQuotaClasses) {
    return Error::InvalidArgument(owner + " has more than " + std::to_string(kMaxQuotaClasses) +
                                  " quota classes");
  }
  for (const auto& [rc, q] : table) {
    if (q.guarantee < 0 || q.limit < 0) {
      return Error::InvalidArgument(owner + " quota " + rc.ToString() + " is negative");
    }
    if (q.limit < q.guarantee) {
      return Error::InvalidArgument(owner + " quota " + rc.ToString() + ": limit " +
                                    std::to_string(q.limit) + " is below guarantee " +
                                    std::to_string(q.guarantee));
    }
  }
  return OkStatus();
}

}  // namespace

Status ValidateTenantPolicy(const TenantPolicy& policy) {
  if (policy.id.empty()) return Error::InvalidArgument("tenant id is empty");
  if (!(policy.weight > 0) || !std::isfinite(policy.weight)) {
    return Error::InvalidArgument("tenant " + policy.id + " weight must be a positive number");
  }
  const std::string owner = "tenant " + policy.id;
  ATRIUM_RETURN_IF_ERROR(ValidateTable(policy.quotas, owner));
  if (policy.projects.size() > kMaxProjects) {
    return Error::InvalidArgument(owner + " has more than " + std::to_string(kMaxProjects) +
                                  " projects");
  }
  std::map<ResourceClass, int64_t> guarantee_sum;
  for (const auto& [name, table] : policy.projects) {
    if (name.empty()) return Error::InvalidArgument(owner + " has a project with an empty name");
    ATRIUM_RETURN_IF_ERROR(ValidateTable(table, owner + " project " + name));
    for (const auto& [rc, q] : table) {
      const Quota* t = policy.QuotaFor(rc);
      const Quota tenant = t ? *t : Quota{};
      if (q.limit > tenant.limit) {
        return Error::InvalidArgument(
            owner + " project " + name + " limit " + std::to_string(q.limit) + " for " +
            rc.ToString() + " is above the tenant's limit " + std::to_string(tenant.limit));
      }
      guarantee_sum[rc] += q.guarantee;
      if (guarantee_sum[rc] > tenant.guarantee) {
        return Error::InvalidArgument(owner + " project guarantees for " + rc.ToString() +
                                      " sum to " + std::to_string(guarantee_sum[rc]) +
                                      ", above the tenant's guarantee " +
                                      std::to_string(tenant.guarantee));
      }
    }
  }
  return OkStatus();
}

EffectiveSplit ClampProjectSplit(TenantPolicy requested) {
  EffectiveSplit out;
  std::map<ResourceClass, int64_t> guarantee_sum;
  for (auto& [name, table] : requested.projects) {
    for (auto& [rc, q] : table) {
      const Quota* t = requested.QuotaFor(rc);
      const Quota tenant = t ? *t : Quota{};
      const Quota before = q;
      q.limit = std::min(q.limit, tenant.limit);
      q.guarantee = std::min(q.guarantee, q.limit);
      if (!(q == before)) out.clamped[name].push_back(rc);
      guarantee_sum[rc] += q.guarantee;
    }
  }
  for (const auto& [rc, sum] : guarantee_sum) {
    const Quota* t = requested.QuotaFor(rc);
    const int64_t tenant_guarantee = t ? t->guarantee : 0;
    if (sum <= tenant_guarantee) continue;
    for (auto& [name, table] : requested.projects) {
      auto q = table.find(rc);
      if (q == table.end() || q->second.guarantee == 0) continue;
      // 128-bit: both factors may be near the API's 10^9 bound.
      const auto scaled =
          static_cast<int64_t>(static_cast<__int128>(q->second.guarantee) * tenant_guarantee / sum);
      if (scaled == q->second.guarantee) continue;
      q->second.guarantee = scaled;
      auto& classes = out.clamped[name];
      if (std::find(classes.begin(), classes.end(), rc) == classes.end()) classes.push_back(rc);
    }
  }
  for (auto& [name, classes] : out.clamped) std::sort(classes.begin(), classes.end());
  out.policy = std::move(requested);
  return out;
}

Status ValidateProjectChange(const TenantPolicy& requested, const std::string& project,
                             const ResourceClass& rc, const std::optional<Quota>& next) {
  auto p = requested.projects.find(project);
  if (p == requested.projects.end()) return Error::NotFound("project not found");
  const Quota* t = requested.QuotaFor(rc);
  const Quota tenant = t ? *t : Quota{};
  // What the project has now, as the admin set it.
  auto row = p->second.find(rc);
  const Quota now = row != p->second.end() ? row->second : Quota{0, tenant.limit};
  const Quota after = next.value_or(Quota{0, tenant.limit});
  if (after.guarantee <= now.guarantee && after.limit <= now.limit) return OkStatus();
  TenantPolicy result = ClampProjectSplit(requested).policy;
  if (next) {
    result.projects[project][rc] = *next;
  } else {
    result.projects[project].erase(rc);
  }
  if (auto valid = ValidateTenantPolicy(result); !valid) {
    Error e = std::move(valid).error();
    e.message = "project " + project + " would over-commit the tenant's quota: " + e.message;
    return e;
  }
  return OkStatus();
}

bool MayShareGpu(std::string_view a, IsolationTier tier_a, std::string_view b,
                 IsolationTier tier_b) {
  return a == b || (tier_a == IsolationTier::kShared && tier_b == IsolationTier::kShared);
}

}  // namespace atrium::sched
