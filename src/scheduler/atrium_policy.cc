#include "scheduler/atrium_policy.h"

#include <cmath>

namespace atrium::sched {
namespace {

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

class AtriumPolicy final : public Policy {
 public:
  explicit AtriumPolicy(std::vector<TypicalPod> workload) : workload_(std::move(workload)) {}
  std::string_view name() const override { return "atrium"; }

  int64_t Score(int32_t, const NodeState& node, const Request& request) override {
    const double before = FragmentOf(node, workload_);
    int64_t best = -1;
    if (request.IsShare()) {
      for (int i = 0; i < node.gpu_count; ++i) {
        if (node.gpu_free[i] < request.milli) continue;
        GpuPick one;
        one.Add(i);
        best = std::max(best, Combined(before, Subtract(node, request, one)));
      }
      return best;
    }
    return Combined(before, Subtract(node, request, TightestGpus(node, request)));
  }

  GpuPick PickGpus(int32_t, const NodeState& node, const Request& request, Rng&) override {
    if (!request.IsShare()) return FirstFreeGpus(node, request);
    const double before = FragmentOf(node, workload_);
    int best = -1;
    int64_t best_score = 0;
    for (int i = 0; i < node.gpu_count; ++i) {
      if (node.gpu_free[i] < request.milli) continue;
      GpuPick one;
      one.Add(i);
      const int64_t s = Combined(before, Subtract(node, request, one));
      if (best < 0 || s > best_score) {
        best = i;
        best_score = s;
      }
    }
    GpuPick pick;
    if (best >= 0) pick.Add(best);
    return pick;
  }

 private:
  int64_t Combined(double before, const NodeState& after) const {
    const auto primary =
        static_cast<int64_t>(100 * Sigmoid((before - FragmentOf(after, workload_)) / 1000));
    const int64_t capacity = int64_t{after.gpu_count} * kMilliPerGpu;
    const int64_t used = capacity == 0 ? 0 : (capacity - after.FreeMilli()) * 999 / capacity;
    return primary * 1000 + used;
  }

  std::vector<TypicalPod> workload_;
};

}  // namespace

std::unique_ptr<Policy> MakeAtriumPolicy(const PolicyContext& context) {
  return std::make_unique<AtriumPolicy>(context.workload);
}

}  // namespace atrium::sched
