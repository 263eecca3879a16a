#include "scheduler/policies.h"

#include <algorithm>
#include <cmath>

#include "scheduler/atrium_policy.h"

namespace atrium::sched {
namespace {

// Normalizers of the reference simulator: a 128-core, 8-GPU node.
constexpr double kCpuScale = 128000.0;
constexpr double kGpuScale = 8000.0;

// The GPU choice the reference uses for whole GPUs in every policy, and for
// shares in all but Random and FGD: best fit.
GpuPick BestFitPick(const NodeState& node, const Request& request) {
  return request.IsShare() ? BestFitGpu(node, request) : FirstFreeGpus(node, request);
}

class RandomPolicy final : public Policy {
 public:
  std::string_view name() const override { return "random"; }
  bool cacheable() const override { return false; }
  void BeginRequest(const Request&, std::span<const int32_t> feasible, Rng& rng) override {
    chosen_ = feasible[rng.Below(feasible.size())];
  }
  int64_t Score(int32_t node, const NodeState&, const Request&) override {
    return node == chosen_ ? 100 : 0;
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng& rng) override {
    if (!request.IsShare()) return FirstFreeGpus(node, request);
    int fitting = 0;
    for (int i = 0; i < node.gpu_count; ++i) fitting += node.gpu_free[i] >= request.milli;
    auto k = static_cast<int>(rng.Below(static_cast<uint64_t>(fitting)));
    GpuPick pick;
    for (int i = 0; i < node.gpu_count; ++i) {
      if (node.gpu_free[i] >= request.milli && k-- == 0) {
        pick.Add(i);
        break;
      }
    }
    return pick;
  }

 private:
  int32_t chosen_ = -1;
};

class DotProductPolicy final : public Policy {
 public:
  std::string_view name() const override { return "dot-product"; }
  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    const double a0 = static_cast<double>(node.cpu_left) / kCpuScale;
    const double a1 = static_cast<double>(node.FreeMilli()) / kGpuScale;
    const double b0 = static_cast<double>(request.cpu) / kCpuScale;
    const double b1 = static_cast<double>(request.TotalMilli()) / kGpuScale;
    return static_cast<int64_t>(100 * (1 - (a0 * b0 + a1 * b1) / 2));
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    return BestFitPick(node, request);
  }
};

class BestFitPolicy final : public Policy {
 public:
  std::string_view name() const override { return "best-fit"; }
  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    const double s = static_cast<double>(node.cpu_left - request.cpu) / kCpuScale * 0.5 +
                     static_cast<double>(node.FreeMilli() - request.TotalMilli()) / kGpuScale * 0.5;
    return static_cast<int64_t>((1 - s) * 100);
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    return BestFitPick(node, request);
  }
};

class GpuPackingPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpu-packing"; }
  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    if (!request.NeedsGpu()) return 0;
    const int free_gpus = node.FullyFreeGpus();
    if (free_gpus == node.gpu_count) return std::max(33 - free_gpus, free_gpus);
    const GpuPick pick = TightestGpus(node, request);
    int untouched = 0;
    int64_t percent_sum = 0;
    for (int k = 0; k < pick.count; ++k) {
      const int32_t free = node.gpu_free[pick.index[k]];
      untouched += free == kMilliPerGpu;
      percent_sum += free * 100 / kMilliPerGpu;
    }
    if (untouched > 0) return std::max(50 - untouched, 33);
    return std::max<int64_t>(100 - percent_sum / 10, 50);
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    return BestFitPick(node, request);
  }
};

class GpuClusteringPolicy final : public Policy {
 public:
  explicit GpuClusteringPolicy(int32_t node_count) : tags_(static_cast<size_t>(node_count)) {}
  std::string_view name() const override { return "gpu-clustering"; }
  int64_t Score(int32_t node, const NodeState& state, const Request& request) override {
    if (!request.NeedsGpu()) return 0;
    const int64_t base = 25 * (8000 - state.FreeMilli()) / 8000;
    const auto& tags = tags_[static_cast<size_t>(node)];
    const int tag = TagOf(request);
    auto it = std::find_if(tags.begin(), tags.end(), [&](const auto& t) { return t.first == tag; });
    if (it != tags.end() && it->second > 0) return base + (tags.size() == 1 ? 75 : 50);
    if (tags.empty()) return base + 25;
    return base;
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    return BestFitPick(node, request);
  }
  void Placed(int32_t node, const NodeState&, const Request& request) override {
    if (!request.NeedsGpu()) return;
    auto& tags = tags_[static_cast<size_t>(node)];
    const int tag = TagOf(request);
    auto it = std::find_if(tags.begin(), tags.end(), [&](const auto& t) { return t.first == tag; });
    if (it == tags.end()) {
      tags.emplace_back(tag, 1);
    } else {
      ++it->second;
    }
  }
  void Removed(int32_t node, const NodeState&, const Request& request) override {
    if (!request.NeedsGpu()) return;
    auto& tags = tags_[static_cast<size_t>(node)];
    const int tag = TagOf(request);
    auto it = std::find_if(tags.begin(), tags.end(), [&](const auto& t) { return t.first == tag; });
    if (it != tags.end() && --it->second == 0) tags.erase(it);
  }

 private:
  // "share-gpu" is 0, "<k>-gpu" is k.
  static int TagOf(const Request& request) { return request.IsShare() ? 0 : request.num_gpu; }
  std::vector<std::vector<std::pair<int, int>>> tags_;  // per node: (tag, pods)
};

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// True when a lower-index GPU has the same free milli: placing a share on
// either leads to the same node state, so only the first needs scoring (and
// the first is the one a tie picks anyway).
bool SameFreeEarlier(const NodeState& node, int i) {
  for (int j = 0; j < i; ++j) {
    if (node.gpu_free[j] == node.gpu_free[i]) return true;
  }
  return false;
}

int64_t FragDeltaScore(double before, double after) {
  return static_cast<int64_t>(100 * Sigmoid((before - after) / 1000));
}

// FGD for a share: the best integer score over the GPUs it fits, and the
// first GPU reaching it (gpu = -1 when none fits).
struct ShareChoice {
  int64_t score = 0;
  int gpu = -1;
};

ShareChoice FgdShareChoice(const NodeState& node, const Request& request,
                           const std::vector<TypicalPod>& workload) {
  const double before = FragmentOf(node, workload);
  ShareChoice best;
  for (int i = 0; i < node.gpu_count; ++i) {
    if (node.gpu_free[i] < request.milli || SameFreeEarlier(node, i)) continue;
    GpuPick one;
    one.Add(i);
    const int64_t s = FragDeltaScore(before, FragmentOf(Subtract(node, request, one), workload));
    if (best.gpu < 0 || s > best.score) best = {s, i};
  }
  return best;
}

class FgdPolicy final : public Policy {
 public:
  explicit FgdPolicy(std::vector<TypicalPod> workload) : workload_(std::move(workload)) {}
  std::string_view name() const override { return "fgd"; }
  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    return FgdScore(node, request, workload_);
  }
  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    if (!request.IsShare()) return FirstFreeGpus(node, request);
    GpuPick pick;
    if (const int gpu = FgdShareChoice(node, request, workload_).gpu; gpu >= 0) pick.Add(gpu);
    return pick;
  }

 private:
  std::vector<TypicalPod> workload_;
};

}  // namespace

int64_t FgdScore(const NodeState& node, const Request& request,
                 const std::vector<TypicalPod>& workload) {
  if (request.IsShare()) return FgdShareChoice(node, request, workload).score;
  const NodeState after = Subtract(node, request, TightestGpus(node, request));
  return FragDeltaScore(FragmentOf(node, workload), FragmentOf(after, workload));
}

const std::vector<std::string>& PolicyNames() {
  static const std::vector<std::string> kNames = {
      "random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit", "fgd", "atrium"};
  return kNames;
}

Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyContext& context) {
  std::unique_ptr<Policy> policy;
  if (name == "random") policy = std::make_unique<RandomPolicy>();
  if (name == "dot-product") policy = std::make_unique<DotProductPolicy>();
  if (name == "gpu-clustering") policy = std::make_unique<GpuClusteringPolicy>(context.node_count);
  if (name == "gpu-packing") policy = std::make_unique<GpuPackingPolicy>();
  if (name == "best-fit") policy = std::make_unique<BestFitPolicy>();
  if (name == "fgd") policy = std::make_unique<FgdPolicy>(context.workload);
  if (name == "atrium") policy = MakeAtriumPolicy(context);
  if (policy) return policy;
  std::string known;
  for (const auto& n : PolicyNames()) known += (known.empty() ? "" : ", ") + n;
  return MakeUnexpected(Error::InvalidArgument("unknown policy \"" + std::string(name) +
                                               "\" (known: " + known + ")"));
}

}  // namespace atrium::sched
