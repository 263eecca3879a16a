// Admission: the requests that can never be placed are rejected at once,
// with the reason in words; everything else may wait in the queue.
//
// Never fits: unknown or suspended tenant; unknown GPU model; a malformed
// shape (1..8 GPUs per node, 1..256 gang nodes, a share of 1..999 milli with
// a memory cap of 1..the GPU's memory, a lease of a node's exact GPU count);
// MIG on a model without MIG or a profile the model does not have; a charge
// above the tenant's or project's limit, or non-preemptible work above the
// guarantee (it may not borrow); no node in the fleet that the tenant may
// use (regions, pools, pool admission, dedicated-pool tier) with the model,
// enough GPUs on one node, or enough such nodes for a gang. Transient state
// (cordons, health, usage, power draw) never causes a rejection.
#pragma once

#include <string>

#include "scheduler/allocation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/placement.h"
#include "scheduler/quota.h"

namespace atrium::sched {

// `request.model` is matched ignoring case; Admit writes the catalog
// spelling back. Empty when the request may wait; otherwise the reason.
std::string AdmissionRefusal(AllocationRequest& request, const TenantPolicy* tenant,
                             const ClusterState& state, const TenantTable& tenants,
                             const QuotaLedger& ledger);

// The node-scope part of AdmissionRefusal: why no node of the fleet that
// the tenant may ever use (regions, pools, pool admission, dedicated-pool
// tier, the model, GPUs per node, enough nodes for a gang) can take the
// request, whatever runs there or is cordoned; empty when one can. The
// scheduler asks it again of queued requests when a tenant's policy or the
// fleet changed, so a request a change made impossible is rejected with the
// words a new one gets. `request.model` must be the catalog spelling.
std::string NodeScopeRefusal(const AllocationRequest& request, const TenantPolicy& tenant,
                             const capacity::GpuModel& model, const ClusterState& state,
                             const TenantTable& tenants);

}  // namespace atrium::sched
