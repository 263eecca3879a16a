// Quota accounting: what each tenant and project uses per resource class,
// and the verdict for one more request. Usage counts running and preempting
// allocations, never pending ones.
//
// Charges, in milli-GPU of the class's model: a whole GPU 1000 (a gang
// nodes × gpus × 1000), a share its milli, a MIG instance MigMilli(compute
// slices) (sevenths rounded down: 7 × 1g fit a 1000-milli quota), a node
// lease its GPUs × 1000.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "capacity/gpu_catalog.h"
#include "scheduler/allocation.h"
#include "scheduler/tenant_policy.h"

namespace atrium::sched {

// The charge of a well-formed request (admission checked its shape and the
// MIG profile; an unknown profile charges 0).
int64_t ChargeMilli(const AllocationRequest& request, const capacity::GpuModel& model);

struct ClassUsage {
  int64_t used = 0;             // every placed allocation
  int64_t non_preemptible = 0;  // interactive + batch; never above the guarantee when placed
  bool operator==(const ClassUsage&) const = default;
};

class QuotaLedger {
 public:
  // Counts a placed allocation (its request and charge_milli).
  void Add(const Allocation& allocation);
  // Undoes Add for the same allocation.
  void Remove(const Allocation& allocation);

  ClassUsage Tenant(std::string_view tenant, const ResourceClass& rc) const;
  ClassUsage Project(std::string_view tenant, std::string_view project,
                     const ResourceClass& rc) const;
  // Calls fn(project, usage) for every project of the tenant with usage of
  // `rc`, in name order.
  template <typename Fn>
  void ForEachProject(std::string_view tenant, const ResourceClass& rc, Fn&& fn) const {
    for (auto it = projects_.lower_bound({std::string(tenant), std::string()});
         it != projects_.end() && it->first.first == tenant; ++it) {
      if (auto u = it->second.find(rc); u != it->second.end()) fn(it->first.second, u->second);
    }
  }
  // Milli-GPU of `model` the tenant uses over every kind (for fair share).
  std::map<std::string, int64_t> ModelUsage(std::string_view tenant) const;

  bool operator==(const QuotaLedger&) const = default;

 private:
  using Table = std::map<ResourceClass, ClassUsage>;
  // tenant → class → usage; (tenant, project) → class → usage.
  std::map<std::string, Table, std::less<>> tenants_;
  std::map<std::pair<std::string, std::string>, Table> projects_;
};

// Sub-levels. A tenant's quota for a class is split into sub-levels: each
// project with its own quota row for the class is one, with the project's
// guarantee; everything else of the tenant in the class (no project, or a
// project without a row for it) is "the rest", with what the projects'
// guarantees leave of the tenant's. A tenant without projects for the class
// is one sub-level, the rest, with the tenant's guarantee. Guarantees are
// honoured per sub-level: a request within its sub-level's guarantee is
// entitled even while siblings' borrowed work fills the tenant's limit, and
// a sibling's work above its own sub-level's guarantee is borrowed for it,
// as between tenants. Non-preemptible work of a sub-level stays within the
// sub-level's guarantee, so every project's guarantee can be honoured
// (non-preemptible work is never reclaimed).

// The sub-level a request of `project` falls in for `rc`: the project when
// it has a quota row for the class, else "" (the rest).
std::string_view SubLevelOf(const TenantPolicy& tenant, std::string_view project,
                            const ResourceClass& rc);
// Whether some project of the tenant has a quota row for `rc` (so the
// tenant's quota for the class has more than one sub-level).
bool SplitsClass(const TenantPolicy& tenant, const ResourceClass& rc);

struct SubLevelQuota {
  int64_t guarantee = 0;
  ClassUsage usage;
};
// The guarantee and usage of sub-level `sub` ("" for the rest) of the
// tenant's class.
SubLevelQuota SubLevelFor(const TenantPolicy& tenant, const QuotaLedger& ledger,
                          std::string_view sub, const ResourceClass& rc);

enum class QuotaVerdict {
  kWithinGuarantee,  // entitled: may trigger reclaim of borrowed capacity
  // Entitled (within its sub-level's guarantee) but not placeable now: a
  // limit is reached by preemptible work its reclaim may take back — the
  // siblings' work above their own sub-levels' guarantees, and, for
  // interactive or batch work, its own sub-level's preemptible work (which
  // yields to the tenant's own more important work within the guarantee).
  // Its reclaim frees that limit headroom as well as room in the cluster.
  kWithinGuaranteeOverLimit,
  kBorrows,    // preemptible work above the guarantee, within the limit
  kWaits,      // not now (over the limit, or non-preemptible above the guarantee)
  kNeverFits,  // the request alone is above what the quota can ever allow
};

// Whether the verdict makes a request entitled (it goes ahead of borrowers
// and may start a reclaim).
inline bool Entitles(QuotaVerdict v) {
  return v == QuotaVerdict::kWithinGuarantee || v == QuotaVerdict::kWithinGuaranteeOverLimit;
}

struct QuotaCheck {
  QuotaVerdict verdict = QuotaVerdict::kWaits;
  // For kWaits and kNeverFits, why, in words, naming the quota with its
  // used/guarantee/limit figures; for the others, the figures.
  std::string reason;
};

// The verdict for placing `request` (charged `charge` milli) now. Rules, in
// order, for the tenant, then the request's sub-level (its project, or the
// rest when the tenant splits the class):
//  - charge above the tenant's (or project's) limit: never fits;
//  - interactive/batch work may not borrow, so charge above the guarantee
//    (tenant, project or rest) never fits, and non-preemptible use + charge
//    above it waits;
//  - used + charge above a limit waits, unless the request is within its
//    sub-level's guarantee and reclaim can give the headroom back
//    (kWithinGuaranteeOverLimit): for the tenant's limit, the other
//    sub-levels' use above their guarantees, plus, for interactive or batch
//    work, its own sub-level's preemptible use above the guarantee (counting
//    the request), covers the excess; for a project's limit, interactive or
//    batch work within the project's guarantee always can (the project's
//    preemptible work above its guarantee is at least the excess);
//  - the sub-level's use (preemptible: all; else non-preemptible) + charge
//    within its guarantee is within guarantee; above it, borrows.
QuotaCheck CheckQuota(const TenantPolicy& tenant, const QuotaLedger& ledger,
                      const AllocationRequest& request, const ResourceClass& rc, int64_t charge);

// CheckQuota's verdict alone, without building the reason (the scheduler
// asks for every queued request on every pass).
QuotaVerdict CheckQuotaVerdict(const TenantPolicy& tenant, const QuotaLedger& ledger,
                               const AllocationRequest& request, const ResourceClass& rc,
                               int64_t charge);

}  // namespace atrium::sched
