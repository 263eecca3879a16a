#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "scheduler/engine.h"
#include "scheduler/policies.h"
#include "scheduler/rng.h"

namespace atrium::sim {
namespace {

// Python's round(x, ndigits) on the value numpy computes: half to even.
double RoundHalfEven(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::nearbyint(x * scale) / scale;
}

}  // namespace

std::vector<TracePod> ArrivalSequence(const Trace& trace, double tune_ratio, uint64_t seed,
                                      std::vector<int32_t>* tie_rank) {
  sched::Rng rng(seed);
  std::vector<TracePod> pods = trace.pods;  // name order
  for (size_t i = pods.size(); i > 1; --i) {
    std::swap(pods[i - 1], pods[rng.Below(i)]);
  }
  int64_t total = 0;
  for (const auto& p : pods) total += int64_t{p.num_gpu} * p.milli;
  const double target = tune_ratio * static_cast<double>(trace.GpuCapacityMilli());
  if (static_cast<double>(total) < target) {
    // Append random clones of the original pods until the next one would
    // overshoot. The check adds milli per GPU, not the clone's total: the
    // reference does so, and a multi-GPU clone may overshoot by up to 7 GPUs.
    for (;;) {
      const TracePod& clone = trace.pods[rng.Below(trace.pods.size())];
      if (static_cast<double>(total + clone.milli) > target) break;
      total += int64_t{clone.num_gpu} * clone.milli;
      pods.push_back(clone);
    }
  } else {
    while (static_cast<double>(total) > target && !pods.empty()) {
      const size_t victim = rng.Below(pods.size());
      total -= int64_t{pods[victim].num_gpu} * pods[victim].milli;
      pods.erase(pods.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  if (tie_rank != nullptr) {
    // A random but fixed node priority for the whole run (Go's Perm shape).
    const size_t n = trace.nodes.size();
    tie_rank->assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const size_t j = rng.Below(i + 1);
      (*tie_rank)[i] = (*tie_rank)[j];
      (*tie_rank)[j] = static_cast<int32_t>(i);
    }
  }
  return pods;
}

double OfflineSharePackingWastePct(const Trace& trace, double tune_ratio, uint64_t seed) {
  const std::vector<TracePod> pods = ArrivalSequence(trace, tune_ratio, seed, nullptr);
  const int64_t capacity = trace.GpuCapacityMilli();
  std::vector<int32_t> shares;
  int64_t arrived = 0;
  for (const auto& p : pods) {
    arrived += int64_t{p.num_gpu} * p.milli;
    if (arrived > capacity) break;
    if (p.num_gpu == 1 && p.milli < sched::kMilliPerGpu) shares.push_back(p.milli);
  }
  std::sort(shares.begin(), shares.end(), std::greater<>());
  std::multiset<int32_t> room;  // free milli of each GPU opened so far
  for (int32_t share : shares) {
    auto it = room.lower_bound(share);
    if (it == room.end()) {
      room.insert(sched::kMilliPerGpu - share);
    } else {
      const int32_t left = *it - share;
      room.erase(it);
      room.insert(left);
    }
  }
  int64_t waste = 0;
  for (int32_t r : room) waste += r;
  return 100.0 * static_cast<double>(waste) / static_cast<double>(capacity);
}

std::vector<std::optional<double>> Discretize(const std::vector<int64_t>& arrived_milli,
                                              const std::vector<int64_t>& used_milli,
                                              int64_t capacity_milli) {
  const double gpus = static_cast<double>(capacity_milli) / sched::kMilliPerGpu;
  // Sums and counts of the rounded allocation ratio per rounded arrival %.
  std::vector<double> sum(kColumns + 1, 0);
  std::vector<int64_t> count(kColumns + 1, 0);
  for (size_t i = 0; i < arrived_milli.size(); ++i) {
    const double arrive = RoundHalfEven(static_cast<double>(arrived_milli[i]) / gpus / 10, 0);
    const double alloc = RoundHalfEven(static_cast<double>(used_milli[i]) / gpus / 10, 2);
    if (arrive < 0 || arrive > kColumns) continue;
    const auto c = static_cast<size_t>(arrive);
    sum[c] += alloc;
    ++count[c];
  }
  std::vector<std::optional<double>> out(kColumns);
  for (int c = 0; c < kColumns; ++c) {
    double s = sum[static_cast<size_t>(c)];
    int64_t n = count[static_cast<size_t>(c)];
    if (n == 0) {
      for (int d = c - 1; d <= c + 1; ++d) {
        if (d < 0 || d > kColumns) continue;
        s += sum[static_cast<size_t>(d)];
        n += count[static_cast<size_t>(d)];
      }
    }
    if (n > 0) out[static_cast<size_t>(c)] = RoundHalfEven(s / static_cast<double>(n), 2);
  }
  return out;
}

Result<RunResult> SimulateRun(const Trace& trace, const RunOptions& options) {
  std::vector<int32_t> tie_rank;
  const std::vector<TracePod> pods =
      ArrivalSequence(trace, options.tune_ratio, options.seed, &tie_rank);

  sched::PolicyContext context;
  context.workload = trace.TypicalPods();
  context.node_count = static_cast<int32_t>(trace.nodes.size());
  auto policy = sched::MakePolicy(options.policy, context);
  if (!policy.has_value()) return MakeUnexpected(policy.error());

  std::vector<sched::NodeState> nodes;
  nodes.reserve(trace.nodes.size());
  for (const auto& n : trace.nodes) nodes.push_back(trace.StateOf(n));
  // The engine's own stream serves the policy's per-request draws (Random);
  // it is derived from the run's seed so every run stays reproducible.
  sched::Engine engine(std::move(nodes), std::move(tie_rank), **policy,
                       options.seed ^ 0x5eed5eed5eedULL);

  RunResult result;
  std::vector<int64_t> arrived(pods.size()), used(pods.size());
  int64_t arrived_milli = 0, used_milli = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    const sched::Request request = trace.RequestOf(pods[i]);
    arrived_milli += request.TotalMilli();
    auto decision = engine.Decide(request);
    if (decision.has_value()) {
      engine.Commit(*decision, request);
      used_milli += request.TotalMilli();
    } else {
      ++result.failed_pods;
    }
    arrived[i] = arrived_milli;
    used[i] = used_milli;
  }
  result.pods = static_cast<int64_t>(pods.size());
  result.decisions = result.pods;
  result.alloc_pct = Discretize(arrived, used, trace.GpuCapacityMilli());
  return result;
}

}  // namespace atrium::sim
