// Reclaim of borrowed capacity: when a request within its tenant's guarantee
// cannot be placed, choose running allocations to preempt so that it fits.
//
// A victim must be preemptible and borrowed: its tenant's use of its class,
// less what is already marked for preemption, is above the guarantee (for
// the requesting tenant, counting the request itself). Candidates are taken
// lowest priority first, newest first (placed_ms, then seq), until the
// request fits in a copy of the cluster with the victims gone; then every
// victim not needed for the fit is dropped again (first-taken first), so the
// set is placement-aware and minimal in that order.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/allocation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/quota.h"
#include "scheduler/tenant_policy.h"

namespace atrium::sched {

using TenantClassKey = std::pair<std::string, ResourceClass>;

struct ReclaimInput {
  const ClusterState& state;
  const std::map<std::string, TenantPolicy, std::less<>>& tenants;
  const QuotaLedger& ledger;
  // Running allocations not yet marked for preemption (candidates).
  std::vector<const Allocation*> running;
  // Charges already marked for preemption, per (tenant, class).
  std::map<TenantClassKey, int64_t> already_marked;
  // The reclaiming request.
  const AllocationRequest& request;
  ResourceClass request_class;
  int64_t request_charge = 0;
  // Whether the request fits in `state` (a copy with victims removed).
  std::function<bool(const ClusterState&)> fits;
};

// The victims, in the order they were chosen, or empty when no set of
// borrowed allocations would make the request fit.
std::vector<const Allocation*> ChooseVictims(const ReclaimInput& input);

}  // namespace atrium::sched
