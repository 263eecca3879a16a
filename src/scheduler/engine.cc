#include "scheduler/engine.h"

#include <cassert>
#include <numeric>

namespace atrium::sched {
namespace {

// Bound on cached scores (entries of 8 bytes): past it the cache starts over.
constexpr size_t kMaxCacheEntries = size_t{8} << 20;

}  // namespace

size_t Engine::RequestHash::operator()(const Request& r) const {
  uint64_t h = static_cast<uint64_t>(r.cpu) * 0x9e3779b97f4a7c15ULL;
  h ^= static_cast<uint64_t>(r.mem) + 0x7f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= (static_cast<uint64_t>(r.num_gpu) << 32 | static_cast<uint32_t>(r.milli)) + (h << 6) +
       (h >> 2);
  h ^= r.model_mask + (h << 6) + (h >> 2);
  return static_cast<size_t>(h);
}

Engine::Engine(std::vector<NodeState> nodes, std::vector<int32_t> tie_rank, Policy& policy,
               uint64_t seed)
    : nodes_(std::move(nodes)),
      tie_rank_(std::move(tie_rank)),
      policy_(policy),
      rng_(seed),
      version_(nodes_.size(), 1) {
  if (tie_rank_.empty()) {
    tie_rank_.resize(nodes_.size());
    std::iota(tie_rank_.begin(), tie_rank_.end(), 0);
  }
  assert(tie_rank_.size() == nodes_.size());
  feasible_.reserve(nodes_.size());
}

int32_t Engine::ClassOf(const Request& full_request) {
  // Scores never read memory (Fits checks it), so requests that differ only
  // in memory share their cached scores.
  Request request = full_request;
  request.mem = 0;
  auto it = classes_.find(request);
  if (it != classes_.end()) return it->second;
  const size_t n = nodes_.size();
  if ((classes_.size() + 1) * n > kMaxCacheEntries) {
    classes_.clear();
    cache_.clear();
  }
  const auto cls = static_cast<int32_t>(classes_.size());
  classes_.emplace(request, cls);
  cache_.resize(cache_.size() + n);
  return cls;
}

int64_t Engine::ScoreOf(int32_t cls, int32_t node, const Request& request) {
  if (cls < 0) return policy_.Score(node, nodes_[static_cast<size_t>(node)], request);
  CachedScore& entry = cache_[static_cast<size_t>(cls) * nodes_.size() + static_cast<size_t>(node)];
  const uint32_t version = version_[static_cast<size_t>(node)];
  if (entry.version != version) {
    entry.score =
        static_cast<int32_t>(policy_.Score(node, nodes_[static_cast<size_t>(node)], request));
    entry.version = version;
  }
  return entry.score;
}

std::optional<Decision> Engine::Decide(const Request& request, const NodeFilter* filter) {
  feasible_.clear();
  const auto n = static_cast<int32_t>(nodes_.size());
  for (int32_t i = 0; i < n; ++i) {
    if (!Fits(nodes_[static_cast<size_t>(i)], request)) continue;
    if (filter != nullptr && !(*filter)(i)) continue;
    feasible_.push_back(i);
  }
  if (feasible_.empty()) return std::nullopt;

  Decision decision;
  if (feasible_.size() == 1) {
    // One candidate: nothing to compare, so the policy is not asked to score.
    decision.node = feasible_[0];
  } else {
    policy_.BeginRequest(request, feasible_, rng_);
    const int32_t cls = policy_.cacheable() ? ClassOf(request) : -1;
    int64_t best_score = 0;
    int32_t best_rank = 0;
    for (int32_t i : feasible_) {
      const int64_t score = ScoreOf(cls, i, request);
      const int32_t rank = tie_rank_[static_cast<size_t>(i)];
      if (decision.node < 0 || score > best_score || (score == best_score && rank < best_rank)) {
        decision.node = i;
        best_score = score;
        best_rank = rank;
      }
    }
    decision.score = best_score;
  }
  if (request.NeedsGpu()) {
    decision.gpus =
        policy_.PickGpus(decision.node, nodes_[static_cast<size_t>(decision.node)], request, rng_);
  }
  return decision;
}

void Engine::Commit(const Decision& decision, const Request& request) {
  auto& state = nodes_[static_cast<size_t>(decision.node)];
  state = Subtract(state, request, decision.gpus);
  Touch(decision.node);
  policy_.Placed(decision.node, state, request);
}

void Engine::Release(int32_t node, const Request& request, const GpuPick& gpus) {
  auto& state = nodes_[static_cast<size_t>(node)];
  state.cpu_left += request.cpu;
  state.mem_left += request.mem;
  for (int k = 0; k < gpus.count; ++k) state.gpu_free[gpus.index[k]] += request.milli;
  Touch(node);
  policy_.Removed(node, state, request);
}

void Engine::SetNode(int32_t node, const NodeState& state) {
  nodes_[static_cast<size_t>(node)] = state;
  Touch(node);
}

void Engine::Touch(int32_t node) {
  uint32_t& v = version_[static_cast<size_t>(node)];
  if (++v == 0) {
    // Wrapped: entries stamped with old versions could collide; start over.
    classes_.clear();
    cache_.clear();
    v = 1;
  }
}

}  // namespace atrium::sched
