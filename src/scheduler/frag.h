// GPU fragmentation against a target workload — the measure of FGD (Weng et
// al., USENIX ATC 2023) as specified in ../shared/data/alibaba-gpu-v2023/METHOD.md
// §1.3 and §4.1. A node's free GPU milli counts as a fragment for a typical
// request class when that class could not use it (the node lacks CPU, the
// model is wrong, or the GPUs are too small), weighted by the class's
// popularity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/node_state.h"

namespace atrium::sched {

// One class of the target workload. types is the class's model list as
// written in the trace (part of the class identity); model_mask is the same
// list as a mask over the snapshot's model table (0 = any model).
struct TypicalPod {
  int64_t cpu = 0;
  int32_t milli = 0;  // per GPU
  int32_t num_gpu = 0;
  std::string types;
  uint64_t model_mask = 0;
  double popularity = 0;  // the chosen classes' popularities sum to 1
};

// One sample of the workload, before any tuning.
struct WorkloadSample {
  int64_t cpu = 0;
  int32_t milli = 0;
  int32_t num_gpu = 0;
  std::string types;
  uint64_t model_mask = 0;
};

// Groups samples by (cpu, milli, num_gpu, types), orders classes by count
// (ties to the larger key), keeps classes while their cumulative count is
// below coverage × samples (so the class that reaches it is kept), and
// renormalizes. coverage is a fraction, 0.95 in FGD.
std::vector<TypicalPod> BuildTypicalPods(const std::vector<WorkloadSample>& samples,
                                         double coverage = 0.95);

// F(node): free GPU milli that the typical workload cannot use, in milli-GPU
// (FGD's "sum except Q3"). Summation order follows METHOD.md §4.1 so results
// match the reference to the last bit.
double FragmentOf(const NodeState& node, const std::vector<TypicalPod>& workload);

}  // namespace atrium::sched
