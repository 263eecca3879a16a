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
  // Milli-GPU of `model` the tenant uses over every kind (for fair share).
  std::map<std::string, int64_t> ModelUsage(std::string_view tenant) const;

  bool operator==(const QuotaLedger&) const = default;

 private:
  using Table = std::map<ResourceClass, ClassUsage>;
  // tenant → class → usage; (tenant, project) → class → usage.
  std::map<std::string, Table, std::less<>> tenants_;
  std::map<std::pair<std::string, std::string>, Table> projects_;
};

enum class QuotaVerdict {
  kWithinGuarantee,  // entitled: may trigger reclaim of borrowed capacity
  kBorrows,          // preemptible work above the guarantee, within the limit
  kWaits,            // not now (over the limit, or non-preemptible above the guarantee)
  kNeverFits,        // the request alone is above what the quota can ever allow
};

struct QuotaCheck {
  QuotaVerdict verdict = QuotaVerdict::kWaits;
  // For kWaits and kNeverFits, why, in words, naming the quota with its
  // used/guarantee/limit figures; for the others, the figures.
  std::string reason;
};

// The verdict for placing `request` (charged `charge` milli) now. Rules:
//  - charge above the tenant's (or project's) limit: never fits;
//  - interactive/batch work may not borrow, so charge above the guarantee
//    never fits, and non-preemptible use + charge above it waits;
//  - used + charge above the limit waits;
//  - preemptible used + charge within the guarantee (tenant and project) is
//    within guarantee; above it, borrows.
QuotaCheck CheckQuota(const TenantPolicy& tenant, const QuotaLedger& ledger,
                      const AllocationRequest& request, const ResourceClass& rc, int64_t charge);

// CheckQuota's verdict alone, without building the reason (the scheduler
// asks for every queued request on every pass).
QuotaVerdict CheckQuotaVerdict(const TenantPolicy& tenant, const QuotaLedger& ledger,
                               const AllocationRequest& request, const ResourceClass& rc,
                               int64_t charge);

}  // namespace atrium::sched
