// The placement policy plug-in. The engine (engine.h) filters nodes, asks the
// policy for an integer score per feasible node, takes the highest score
// (ties to the node with the smallest tie rank) and asks the policy which
// GPUs of the chosen node to use. Atrium's own policy and every baseline of
// the trace simulator implement this one interface over the same snapshot.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "scheduler/node_state.h"
#include "scheduler/rng.h"

namespace atrium::sched {

class Policy {
 public:
  virtual ~Policy() = default;

  virtual std::string_view name() const = 0;

  // True when Score(node, state, request) depends only on the node's state,
  // the request and what Placed() told the policy about that node. The engine
  // then reuses a node's score for an identical request until the node
  // changes. Policies that draw random numbers per request return false.
  virtual bool cacheable() const { return true; }

  // Called once per request with the feasible nodes (at least two), before
  // any Score call for it.
  virtual void BeginRequest(const Request& request, std::span<const int32_t> feasible, Rng& rng) {}

  // Higher is better. Must not depend on other nodes when cacheable(), nor
  // on request.mem (the engine checks memory in Fits and caches scores
  // across requests that differ only in memory).
  virtual int64_t Score(int32_t node, const NodeState& state, const Request& request) = 0;

  // The GPUs of the chosen node that the request takes (empty for CPU-only
  // requests). state fits the request.
  virtual GpuPick PickGpus(int32_t node, const NodeState& state, const Request& request,
                           Rng& rng) = 0;

  // The request was placed on node (state is the node after placing it).
  virtual void Placed(int32_t node, const NodeState& state, const Request& request) {}
  // The request was removed from node (state is the node after removing it).
  virtual void Removed(int32_t node, const NodeState& state, const Request& request) {}
};

}  // namespace atrium::sched
