// Atrium's default placement policy. See atrium_policy.cc for the rule and
// the reasons behind it; BENCHMARKS.md for how it compares with the
// baselines on the Alibaba trace.
#pragma once

#include <memory>

#include "scheduler/policies.h"

namespace atrium::sched {

std::unique_ptr<Policy> MakeAtriumPolicy(const PolicyContext& context);

}  // namespace atrium::sched
