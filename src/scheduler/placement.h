// Where a request can go: the per-node rules (inventory flags, pools,
// regions, isolation tiers, power budgets) with the reason each node is
// refused, and the search for a placement of each allocation kind.
//
//  - gpu (1..8 on one node): the placement engine picks the node, first among
//    nodes where the GPUs fit inside one NVLink group, then anywhere; the GPUs
//    are the tightest NVLink group that holds them all.
//  - gang (nodes > 1): all nodes or none; same rack preferred (the rack with
//    the fewest fitting nodes that still has enough), then the same pool,
//    then any nodes; power budgets are checked for the gang as a whole.
//  - share: the engine over a per-tenant view in which GPUs the tenant may
//    not share (another tenant's work and either is not tier shared, or not
//    enough GPU memory for the cap) show no free capacity.
//  - mig: a GPU already in MIG mode with room first (the one left with the
//    fewest free compute slices, so others stay free), else a whole free
//    MIG-capable GPU chosen by the engine and switched to MIG; the start slot
//    is capacity::ChooseStart's (keeps most room).
//  - node: the first empty node (fleet order) with exactly the GPUs asked.
//
// Pure: reads a ClusterState, changes nothing but the engine's cache.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/allocation.h"
#include "scheduler/cluster_state.h"
#include "scheduler/engine.h"
#include "scheduler/tenant_policy.h"

namespace atrium::sched {

using TenantTable = std::map<std::string, TenantPolicy, std::less<>>;

// Everything a placement search reads. All references must outlive it.
struct PlacementContext {
  const ClusterState& state;
  const TenantTable& tenants;
  const TenantPolicy& tenant;
  const AllocationRequest& request;  // well-formed (admission passed)
  const capacity::GpuModel& model;
};

struct Placement {
  std::vector<NodePlacement> nodes;
  int mig_start = -1;
};

// Why node i can never take the request whatever runs on it (model, pool,
// region, tenant pools/regions, pool admission, dedicated-pool tier, the
// request's node requirements (RequirementRejection), GPU count, host CPU or memory above the
// request's GPU fraction of the node's — whole GPUs g/n, a share milli/1000/n, a MIG instance
// slices/7/n, rounded down — or empty.
std::string StaticNodeRejection(const PlacementContext& ctx, int32_t i);

// Why node `n`'s GPU software does not meet `requirements`, e.g. "driver
// 550.54.15, needs >= 560" or "CUDA version unknown, needs >= 12.6"; empty
// when it does (always, for Empty() requirements). The GPU-model list is the
// request's business (admission), not the node's.
std::string RequirementRejection(const NodeRequirements& requirements, const capacity::Node& n);

// For a request whose requirements no node in `nodes` meets (each otherwise
// usable by it): what is missing, in words, e.g. "no node has driver >= 560
// (newest: 550.54.15)" or "no node has both driver >= 560 and CUDA >= 12.6".
std::string RequirementsShortfall(const NodeRequirements& requirements, const ClusterState& state,
                                  const std::vector<int32_t>& nodes);

// Why node i cannot take the request now, before looking at its GPUs:
// the static reasons, cordon, drain, lease, dedicated-node isolation either
// way, or the power budget of its rack or site with `extra_rack_watts` /
// `extra_site_watts` already promised (gangs). Empty when it may.
std::string NodeRejection(const PlacementContext& ctx, int32_t i, int64_t extra_rack_watts = 0,
                          int64_t extra_site_watts = 0);

// Watts the request adds on one node (see cluster_state.h's power model).
int64_t RequestWattsPerNode(const PlacementContext& ctx, int32_t i);

// A placement for the request now, or nullopt. With an engine (whose
// snapshot must equal ClusterState::EngineView of every node) the engine's
// policy chooses nodes; without one the first fitting node in fleet order is
// taken (reclaim planning and Explain need only feasibility).
std::optional<Placement> FindPlacement(const PlacementContext& ctx, Engine* engine);

// Why no node takes the request now, in words: refusals grouped by reason
// with node counts, e.g. "2 nodes: GPU model is L40S; 1 node: power budget of
// rack rack-0: would need 700 W, 200 W left; 1 node: not 2 free GPUs; 1 node:
// host CPU: needs 24000 milli, 0 free". A node whose GPUs are short is
// reported so even when its host is short too; host CPU or memory is named
// only when the GPUs would fit.
std::string DiagnoseNoFit(const PlacementContext& ctx);

}  // namespace atrium::sched
