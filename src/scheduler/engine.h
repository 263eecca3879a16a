// The placement engine: one request at a time over a snapshot of nodes.
// Filter (Fits plus an optional caller filter) → score with the policy →
// highest score, ties to the smallest tie rank → GPUs from the policy.
// Scores of cacheable policies are kept per (request class, node) and
// recomputed only for nodes that changed, so a decision costs a few
// nanoseconds per node once the cache is warm.
//
// Pure and single-threaded: no clock, no I/O; deterministic for a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "scheduler/node_state.h"
#include "scheduler/policy.h"
#include "scheduler/rng.h"

namespace atrium::sched {

struct Decision {
  int32_t node = -1;
  GpuPick gpus;
  int64_t score = 0;
};

// Extra per-node admission (isolation, power, cordon ...) supplied by the
// scheduler; true admits the node.
using NodeFilter = std::function<bool(int32_t node)>;

class Engine {
 public:
  // tie_rank[i] orders node i among equal scores (smaller wins); it must be a
  // permutation of 0..n-1 or empty (then node index order is used). The
  // policy must outlive the engine.
  Engine(std::vector<NodeState> nodes, std::vector<int32_t> tie_rank, Policy& policy,
         uint64_t seed);

  // Chooses a node and GPUs for request, or nullopt when no node passes the
  // filters. Changes nothing but the score cache and the random stream.
  std::optional<Decision> Decide(const Request& request, const NodeFilter* filter = nullptr);

  // Applies a decision returned by Decide() for the same request.
  void Commit(const Decision& decision, const Request& request);

  // Returns a placed request's resources to its node.
  void Release(int32_t node, const Request& request, const GpuPick& gpus);

  // Replaces a node's state (inventory change: cordon, health, re-layout).
  void SetNode(int32_t node, const NodeState& state);

  const NodeState& node(int32_t i) const { return nodes_[static_cast<size_t>(i)]; }
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  Policy& policy() { return policy_; }

 private:
  struct RequestHash {
    size_t operator()(const Request& r) const;
  };
  struct CachedScore {
    uint32_t version = 0;  // 0 = empty
    int32_t score = 0;
  };

  int32_t ClassOf(const Request& request);
  int64_t ScoreOf(int32_t cls, int32_t node, const Request& request);
  void Touch(int32_t node);

  std::vector<NodeState> nodes_;
  std::vector<int32_t> tie_rank_;
  Policy& policy_;
  Rng rng_;
  std::vector<uint32_t> version_;
  std::unordered_map<Request, int32_t, RequestHash> classes_;
  std::vector<CachedScore> cache_;  // class-major: cache_[cls * n + node]
  std::vector<int32_t> feasible_;
};

}  // namespace atrium::sched
