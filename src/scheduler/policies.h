// The placement policies. Baselines follow the FGD paper's simulator exactly
// as ../shared/data/alibaba-gpu-v2023/METHOD.md §2.4, §3 and §4.3 specify —
// integer truncation included — so that comparisons with them are honest.
// Atrium's own policy ("atrium", the scheduler's default) is described in
// atrium_policy.h.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "scheduler/frag.h"
#include "scheduler/policy.h"

namespace atrium::sched {

// What a policy may know beyond the snapshot: the target workload, used by
// the fragmentation-aware policies (FGD and Atrium's).
struct PolicyContext {
  std::vector<TypicalPod> workload;
  int32_t node_count = 0;
};

// Names accepted by MakePolicy, in the order the simulator reports them.
const std::vector<std::string>& PolicyNames();

// "random", "dot-product", "gpu-clustering", "gpu-packing", "best-fit",
// "fgd", "atrium". Unknown names are an InvalidArgument listing the known ones.
Result<std::unique_ptr<Policy>> MakePolicy(std::string_view name, const PolicyContext& context);

// FGD's node score for a request (METHOD.md §4.3), exposed for tests.
int64_t FgdScore(const NodeState& node, const Request& request,
                 const std::vector<TypicalPod>& workload);

}  // namespace atrium::sched
