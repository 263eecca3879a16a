// A workload's cgroups (v1): one directory per controller under
// <root>/<controller>/<parent>/<workload id>, with its limits written before
// the sandbox joins. What the host refuses (a controller not mounted, a
// directory it will not create, a limit it will not take) is reported, not
// hidden: the backend records it in the workload's status and refuses to
// start a workload whose tenant demands full confinement.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atrium::exec_local {

struct CgroupLimits {
  int64_t memory_bytes = 0;  // 0 = no limit (accounting only)
  int64_t cpu_milli = 0;     // 0 = no quota
  int64_t pids_max = 0;      // must be > 0
  // devices.allow rules ("c 195:0 rw"); everything else is denied.
  std::vector<std::string> device_rules;
};

struct CgroupSetup {
  std::vector<std::string> dirs;          // created and limited; the sandbox joins each
  std::vector<std::string> not_enforced;  // one phrase per refused mechanism
  bool can_kill_all = false;              // a directory whose cgroup.procs lists every process
};

// Creates the cgroups, best effort; never throws.
CgroupSetup CreateWorkloadCgroups(const std::string& root, const std::string& parent,
                                  const std::string& workload_id, const CgroupLimits& limits);

// Every pid listed in the cgroup.procs of `dirs`, without duplicates.
std::vector<int> CgroupProcesses(const std::vector<std::string>& dirs);

// Sends `signal` to every process in the cgroups; returns how many it signalled.
int SignalCgroupProcesses(const std::vector<std::string>& dirs, int signal);

// SIGKILLs what is left and removes the directories (a cgroup with
// processes cannot be removed: retried a bounded number of times).
void RemoveWorkloadCgroups(const std::vector<std::string>& dirs);

}  // namespace atrium::exec_local
