// Helpers shared by the scheduler's source files (scheduler.cc, the pass,
// the event handlers, explain and restore). Private to src/scheduler: not
// part of the scheduler's interface.
#pragma once

#include "scheduler/allocation.h"
#include "scheduler/quota.h"

namespace atrium::sched {

// The quota class (model, kind) a request is charged to.
inline ResourceClass ClassOf(const AllocationRequest& r) { return {r.model, r.kind}; }

}  // namespace atrium::sched
