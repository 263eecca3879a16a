// Which request shapes are known not to fit the cluster as it is now, so a
// pass does not search for a placement it already failed to find.
//
// A shape is everything a placement search reads from a request: tenant
// (its tier, pools, regions), project, kind, priority, model, sizes, host
// CPU and memory, pool and region — the request without its id. Two
// requests of one shape find a placement in the same cluster state or both
// fail, and a failed search changes nothing (no random draw is made when no
// node is feasible), so skipping the second search decides exactly what
// searching would.
//
// "The cluster as it is now" is a generation number the scheduler bumps on
// every change that can alter a search's answer: a placement taken or given
// back, a node's flags or GPU health, a tenant's policy, the placement
// policy. A mark from an older generation means nothing. One tenant's
// backlog of a shape that does not fit therefore costs one search per
// generation, not one per queued request.
#pragma once

#include <cstdint>
#include <set>

#include "scheduler/allocation.h"

namespace atrium::sched {

class ShapeMemo {
 public:
  // Whether a search for `request`'s shape failed in `generation`.
  bool KnownNotToFit(const AllocationRequest& request, uint64_t generation) const;
  // Notes that the search for `request`'s shape failed in `generation`.
  // Marks of older generations are dropped first, so the memo holds at most
  // one entry per shape that failed in the current generation.
  void NoteNoFit(const AllocationRequest& request, uint64_t generation);
  size_t size() const { return failed_.size(); }

 private:
  // Orders requests by shape (every field but the id).
  struct ShapeLess {
    bool operator()(const AllocationRequest& x, const AllocationRequest& y) const;
  };
  uint64_t generation_ = 0;
  std::set<AllocationRequest, ShapeLess> failed_;  // shapes that failed in generation_
};

}  // namespace atrium::sched
