#include "scheduler/frag.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace atrium::sched {

std::vector<TypicalPod> BuildTypicalPods(const std::vector<WorkloadSample>& samples,
                                         double coverage) {
  using Key = std::tuple<int64_t, int32_t, int32_t, std::string>;
  std::map<Key, std::pair<int64_t, uint64_t>> counts;  // key -> (count, mask)
  for (const auto& s : samples) {
    auto& entry = counts[Key{s.cpu, s.milli, s.num_gpu, s.types}];
    ++entry.first;
    entry.second = s.model_mask;
  }
  std::vector<std::pair<Key, std::pair<int64_t, uint64_t>>> classes(counts.begin(), counts.end());
  std::stable_sort(classes.begin(), classes.end(), [](const auto& a, const auto& b) {
    if (a.second.first != b.second.first) return a.second.first > b.second.first;
    return a.first > b.first;
  });
  const double goal = coverage * static_cast<double>(samples.size());
  std::vector<TypicalPod> out;
  int64_t cumulative = 0;
  for (const auto& [key, value] : classes) {
    if (static_cast<double>(cumulative) >= goal) break;
    cumulative += value.first;
    out.push_back(TypicalPod{std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key),
                             value.second, static_cast<double>(value.first)});
  }
  for (auto& pod : out) pod.popularity /= static_cast<double>(cumulative);
  return out;
}

double FragmentOf(const NodeState& node, const std::vector<TypicalPod>& workload) {
  // Buckets in METHOD.md's order: Q1, Q2, Q3, Q4, XL, XR, NoAccess.
  double q1 = 0, q2 = 0, q3 = 0, q4 = 0, xl = 0, xr = 0, na = 0;
  const double free_total = static_cast<double>(node.FreeMilli());
  for (const auto& pod : workload) {
    const double p = pod.popularity;
    if (pod.milli == 0) {
      (node.cpu_left >= pod.cpu ? xl : xr) += p * free_total;
      continue;
    }
    if (pod.model_mask != 0 && !Request{0, 0, 1, 1, pod.model_mask}.AllowsModel(node.model)) {
      na += p * free_total;
      continue;
    }
    int fitting = 0;
    int64_t unusable = 0;
    for (int i = 0; i < node.gpu_count; ++i) {
      if (node.gpu_free[i] >= pod.milli) {
        ++fitting;
      } else {
        unusable += node.gpu_free[i];
      }
    }
    if (fitting >= pod.num_gpu) {
      if (node.cpu_left >= pod.cpu) {
        const double frag = p * static_cast<double>(unusable);
        q2 += frag;
        q3 += p * (free_total - static_cast<double>(unusable));
      } else {
        q4 += p * free_total;
      }
    } else {
      (node.cpu_left >= pod.cpu ? q2 : q1) += p * free_total;
    }
  }
  (void)q3;
  return q1 + q2 + q4 + xl + xr + na;
}

}  // namespace atrium::sched
