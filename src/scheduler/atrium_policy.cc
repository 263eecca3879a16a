#include "scheduler/atrium_policy.h"

#include <algorithm>
#include <cmath>

namespace atrium::sched {
namespace {

// Atrium's policy keeps what makes FGD work and adds what it misses. A node's
// score is, from most to least significant:
//
// 1. FGD's score: the change in the node's GPU fragmentation against the
//    target workload, through a sigmoid, truncated to an integer. Near-equal
//    placements tie, which matters: the ties are broken by the engine's fixed
//    node rank, which behaves like first-fit among good placements and keeps
//    untouched nodes whole. Scoring the exact fragmentation instead loses about
//    a point of allocation on the Alibaba trace (METHOD.md §7.1), and every
//    spreading tie-break we tried (CPU/GPU balance, most free, largest node
//    first) loses several.
//
// 2. Displaced work: how many pods of the target workload, in expectation,
//    the node could host before the placement and no longer after, counting
//    each class's pods as they would really pack — several per GPU for small
//    shares, bounded by the node's free CPU — and truncated to whole pods.
//    FGD asks only whether one pod of a class still fits, so it cannot see a
//    placement that takes the CPU the node's remaining GPUs need, or a share
//    that leaves room for one pod where there was room for two. On the openb
//    traces this halves the GPUs stranded for lack of CPU.
//
// 3. For work without GPUs, the node left with the least free GPU: such
//    work's CPU is best taken where the GPUs are already spoken for.
//
// Without a target workload (no request history yet) 1 and 2 are flat, and
// GPU work falls back to packing: the node left with the least free GPU.
//
// BENCHMARKS.md §4 has the numbers against FGD and the other baselines.
constexpr int64_t kTertiary = 1000;  // range of (3)
constexpr int64_t kMaxDisplaced = 999;

int64_t FragmentScore(double before, double after) {
  return static_cast<int64_t>(100 / (1 + std::exp(-((before - after) / 1000))));
}

// Pods of a class that fit on the node if nothing else were placed there.
int64_t PodsThatFit(const NodeState& node, const TypicalPod& pod) {
  if (pod.milli == 0) return pod.cpu > 0 ? node.cpu_left / pod.cpu : 0;
  if (pod.model_mask != 0 && !Request{0, 0, 1, 1, pod.model_mask}.AllowsModel(node.model)) {
    return 0;
  }
  int64_t by_gpu = 0;
  if (pod.num_gpu == 1) {
    for (int i = 0; i < node.gpu_count; ++i) by_gpu += node.gpu_free[i] / pod.milli;
  } else {
    int whole = 0;
    for (int i = 0; i < node.gpu_count; ++i) whole += node.gpu_free[i] >= pod.milli;
    by_gpu = whole / pod.num_gpu;
  }
  return pod.cpu > 0 ? std::min(by_gpu, node.cpu_left / pod.cpu) : by_gpu;
}

class AtriumPolicy final : public Policy {
 public:
  explicit AtriumPolicy(std::vector<TypicalPod> workload) : workload_(std::move(workload)) {}

  std::string_view name() const override { return "atrium"; }

  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    return Best(node, request).score;
  }

  // Whole GPUs: the first free ones by index. A share: the GPU whose use
  // scores best, the lowest index on ties.
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    if (!request.IsShare()) return FirstFreeGpus(node, request);
    GpuPick pick;
    pick.Add(Best(node, request).gpu);
    return pick;
  }

 private:
  struct Choice {
    int64_t score = -1;
    int gpu = -1;  // for a share: the GPU that scores best
  };

  // What the node offers before the placement, computed once per node.
  struct Before {
    double fragment = 0;
    std::vector<int64_t> pods;  // per workload class
  };

  Choice Best(const NodeState& node, const Request& request) const {
    Before before{FragmentOf(node, workload_), {}};
    before.pods.reserve(workload_.size());
    for (const auto& pod : workload_) before.pods.push_back(PodsThatFit(node, pod));
    if (!request.IsShare()) {
      return {Combined(before, Subtract(node, request, TightestGpus(node, request)), request), -1};
    }
    // GPUs with equal free milli lead to the same node state: score each
    // distinct value once, keeping the lowest index that has it.
    Choice best;
    for (int i = 0; i < node.gpu_count; ++i) {
      if (node.gpu_free[i] < request.milli) continue;
      bool seen = false;
      for (int j = 0; j < i && !seen; ++j) seen = node.gpu_free[j] == node.gpu_free[i];
      if (seen) continue;
      GpuPick one;
      one.Add(i);
      const int64_t score = Combined(before, Subtract(node, request, one), request);
      if (score > best.score) best = {score, i};
    }
    return best;
  }

  int64_t Combined(const Before& before, const NodeState& after, const Request& request) const {
    const int64_t fragment = FragmentScore(before.fragment, FragmentOf(after, workload_));
    double displaced = 0;
    for (size_t k = 0; k < workload_.size(); ++k) {
      displaced += workload_[k].popularity *
                   static_cast<double>(before.pods[k] - PodsThatFit(after, workload_[k]));
    }
    const int64_t kept =
        kMaxDisplaced - std::clamp<int64_t>(static_cast<int64_t>(displaced), 0, kMaxDisplaced);
    int64_t tertiary = 0;
    if (!request.NeedsGpu() || workload_.empty()) {
      const int64_t most = int64_t{kMaxGpusPerNode} * kMilliPerGpu;
      tertiary = (kTertiary - 1) * (most - after.FreeMilli()) / most;
    }
    return (fragment * (kMaxDisplaced + 1) + kept) * kTertiary + tertiary;
  }

  std::vector<TypicalPod> workload_;
};

}  // namespace

std::unique_ptr<Policy> MakeAtriumPolicy(const PolicyContext& context) {
  return std::make_unique<AtriumPolicy>(context.workload);
}

}  // namespace atrium::sched
