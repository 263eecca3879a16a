// Request shapes: what a placement search and a quota verdict read from a
// request, so the scheduler can decide once for every queued request of a
// shape what it would decide for each.
//
// A shape is everything a placement search reads from a request: tenant
// (its tier, pools, regions), project, kind, priority, model, sizes, host
// CPU and memory, pool, region and node requirements — the request without
// its id. Two
// requests of one shape find a placement in the same cluster state or both
// fail, and a failed search changes nothing (no random draw is made when no
// node is feasible), so skipping the second search decides exactly what
// searching would.
//
// "The cluster state" is a generation number the scheduler bumps on every
// change that can alter a search's answer: a placement taken or given back,
// a node's flags or GPU health, a tenant's policy, the placement policy. The
// scheduler keeps its queued requests by shape and marks a shape whose
// search failed with the generation; a mark from an older generation means
// nothing. One tenant's backlog of a shape that does not fit therefore
// costs one search per generation, not one per queued request.
#pragma once

#include "scheduler/allocation.h"

namespace atrium::sched {

// Orders requests by shape (every field but the id), the fields the quota
// reads (SameQuotaKey) first.
struct ShapeLess {
  bool operator()(const AllocationRequest& x, const AllocationRequest& y) const;
};

// Whether the quota reads the same from two requests: tenant, project, kind,
// priority, model and what the charge is made of. In shape order the shapes
// the quota reads alike are neighbours.
bool SameQuotaKey(const AllocationRequest& x, const AllocationRequest& y);

}  // namespace atrium::sched
