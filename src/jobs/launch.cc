#include "jobs/launch.h"

#include <map>

namespace atrium::jobs {

Result<exec::LaunchSpec> BuildLaunchSpec(const JobRecord& job, const JobSpec& spec,
                                         const AllocationRecord& allocation,
                                         const ResolvedEnvironment& environment,
                                         const std::string& archive_path) {
  if (allocation.placement.size() != 1) {
    return Error::InvalidArgument("allocation " + allocation.id + " is placed on " +
                                  std::to_string(allocation.placement.size()) +
                                  " nodes; a job runs on one");
  }
  const AllocationPlacementRecord& where = allocation.placement.front();
  exec::LaunchSpec l;
  l.workload_id = job.workload_id();
  l.job_id = job.id;
  l.tenant_id = job.tenant_id;
  l.project = job.project;
  l.node = where.node;
  for (int index : where.gpus) {
    exec::GpuGrant g;
    g.index = index;
    if (allocation.kind == "mig") {
      g.mig_profile = allocation.mig_profile;
      g.mig_start = static_cast<int>(allocation.mig_start);
    } else if (allocation.kind == "share") {
      g.share_milli = static_cast<int32_t>(allocation.milli);
      g.memory_cap_mib = allocation.gpu_memory_mib;
    }
    l.gpus.push_back(std::move(g));
  }
  l.cpu_milli = allocation.cpu_milli;
  l.memory_mib = allocation.memory_mib;
  if (spec.script.empty()) {
    l.argv = spec.Argv();
  } else {
    l.script = spec.script;
    l.argv = spec.args;
  }
  // The template's variables, then the job's (which win), sorted by name.
  // A template (a tenant may publish its own) sets no reserved name either.
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : environment.env) {
    if (!IsReservedEnvName(k)) env[k] = v;
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  l.env.assign(env.begin(), env.end());
  l.archive_path = archive_path;
  l.root_fs = environment.root_fs;
  l.host_network = spec.platform.host_network;
  l.read_only_binds = spec.platform.read_only_binds;
  l.time_limit_s = spec.time_limit_s;
  l.priority = std::string(sched::PriorityName(spec.resources.priority));
  return l;
}

}  // namespace atrium::jobs
