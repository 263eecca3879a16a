// From a job's attempt and the allocation the scheduler placed for it to
// the backend's LaunchSpec. Pure.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/result.h"
#include "exec/backend.h"
#include "jobs/job_spec.h"
#include "model/job_records.h"
#include "model/records.h"

namespace atrium::jobs {

// An environment template resolved for one job (the templates helper
// provides it through JobServiceOptions::resolve_environment).
struct ResolvedEnvironment {
  std::string pinned;   // "name@version": what the job is recorded to run on
  std::string root_fs;  // the sandbox's root filesystem ("" = the host's)
  // Set before the job's own env; the job's own win on a clash.
  std::vector<std::pair<std::string, std::string>> env;
  // What a node must run for it: the job's allocation asks for these.
  sched::NodeRequirements requirements;
};

// The launch of `job`'s current attempt on `allocation` (which must be
// placed on one node). InvalidArgument when the allocation is not placed
// or spans nodes.
Result<exec::LaunchSpec> BuildLaunchSpec(const JobRecord& job, const JobSpec& spec,
                                         const AllocationRecord& allocation,
                                         const ResolvedEnvironment& environment,
                                         const std::string& archive_path);

}  // namespace atrium::jobs
