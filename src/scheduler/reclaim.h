// Reclaim of borrowed capacity: when a request within its tenant's guarantee
// cannot be placed, choose running allocations to preempt so that it fits.
//
// A victim must be preemptible and borrowed: its tenant's use of its class,
// less what is already marked for preemption, is above the guarantee (for
// the requesting tenant, counting the request itself), and so is its
// sub-level's use (see quota.h; counting the request when it is of the same
// sub-level) above the sub-level's guarantee — so a project's work within
// its own guarantee is never taken, and a sibling's only above it. For a
// tenant without projects the two are one. Candidates are taken lowest
// priority first, newest first (placed_ms, then seq), until the request
// fits in a copy of the cluster with the victims gone and the victims of
// the request's own tenant and class cover its limit deficit; then every
// victim neither needs is dropped again (first-taken first), so the set is
// placement-aware and minimal in that order.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "scheduler/allocation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/quota.h"
#include "scheduler/tenant_policy.h"

namespace atrium::sched {

using TenantClassKey = std::pair<std::string, ResourceClass>;
// (tenant, class, sub-level: a project with a quota row, or "" for the rest).
using SubLevelKey = std::tuple<std::string, ResourceClass, std::string>;

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
  // Like already_marked, per sub-level (only tenants that split a class
  // need entries).
  std::map<SubLevelKey, int64_t> already_marked_sub_levels = {};
  // request_charge's share that falls in the request's sub-level (its
  // charge and its sub-level's older entitled requests').
  int64_t request_sub_level_charge = 0;
  // How far the tenant's use of the request's class, with request_charge
  // and less what is already marked, would be above its limit: the victims
  // of that tenant and class must give back at least this much (limit
  // headroom for a request within its sub-level's guarantee). 0: none.
  int64_t limit_deficit = 0;
  // The same for the request's project's limit: victims of the tenant's
  // class in the request's project give back at least this much. 0: none.
  int64_t project_limit_deficit = 0;
};

// The victims, in the order they were chosen, or empty when no set of
// borrowed allocations would make the request fit.
std::vector<const Allocation*> ChooseVictims(const ReclaimInput& input);

// Whether every one of `victims` (a reclaim's, chosen before) is still
// borrowed, taken in ChooseVictims' order: a quota raised or the victims'
// tenant's other work released since can leave one within its guarantee,
// and then the reclaim must be planned again. `input.running` is unused;
// `input.already_marked` must not count `victims`.
bool StillBorrowed(const ReclaimInput& input, std::vector<const Allocation*> victims);

}  // namespace atrium::sched
