// The trace simulator: replays a trace the way the FGD paper's simulator
// does (METHOD.md §1.4–§5.2) through the same placement engine and policies
// the scheduler runs. Pods arrive one at a time in a seeded shuffle, tuned to
// a multiple of GPU capacity, never depart; a pod that fits nowhere fails.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/trace.h"

namespace atrium::sim {

inline constexpr int kColumns = 131;  // arrived workload 0..130 % of GPU capacity

struct RunOptions {
  std::string policy;
  uint64_t seed = 42;
  double tune_ratio = 1.3;  // offered GPU request as a multiple of capacity
};

// One run: per arrived-% column, the mean GPU allocation ratio (% of GPU
// capacity); nullopt where no pod arrived near that column.
struct RunResult {
  std::vector<std::optional<double>> alloc_pct;  // kColumns entries
  int64_t pods = 0;
  int64_t failed_pods = 0;
  int64_t decisions = 0;  // pods the engine placed or rejected
};

Result<RunResult> SimulateRun(const Trace& trace, const RunOptions& options);

// The pod list a run replays: name order, shuffled, then tuned to
// tune_ratio × capacity (METHOD.md §1.5–1.6). Exposed for tests.
std::vector<TracePod> ArrivalSequence(const Trace& trace, double tune_ratio, uint64_t seed,
                                      std::vector<int32_t>* tie_rank);

// A reference for placement quality, not a policy: the GPU milli left over
// when the GPU shares that have arrived by the time arrivals reach 100 % of
// capacity are packed offline by best-fit decreasing (every share known in
// advance, CPU ignored), as % of GPU capacity. Shares that cannot fill a GPU
// leave that remainder free, so an online policy that places every share
// does about this well at best (not a strict bound: leaving some shares
// unplaced could in principle come out lower).
double OfflineSharePackingWastePct(const Trace& trace, double tune_ratio, uint64_t seed);

// METHOD.md §5.2: arrived and allocated milli per pod → per-column mean.
std::vector<std::optional<double>> Discretize(const std::vector<int64_t>& arrived_milli,
                                              const std::vector<int64_t>& used_milli,
                                              int64_t capacity_milli);

}  // namespace atrium::sim
