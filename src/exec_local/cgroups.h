// A workload's cgroups, on either hierarchy the host mounts at the root:
//  - cgroup v1: one directory per controller under
//    <root>/<controller>/<parent>/<workload id> (freezer, pids, memory,
//    cpu, devices);
//  - cgroup v2 (the unified hierarchy: <root>/cgroup.controllers exists):
//    one directory <root>/<parent>/<workload id>, with memory, pids and
//    cpu enabled for <parent>'s children (cgroup.subtree_control of the
//    root and of <parent>), and memory.max, pids.max and cpu.max written.
//    <root> must be a cgroup that may hand controllers down: the unified
//    root, or a subtree delegated to Atrium holding no process itself. v2
//    has no devices controller (an eBPF program instead): the sandbox's own
//    /dev, read-only, with only the granted nodes, is the device fence.
// Limits are written before the sandbox joins. What the host refuses (a
// controller not mounted or not delegated, a directory it will not create,
// a limit it will not take) is reported, not hidden: the backend records it
// in the workload's status and refuses to start a workload whose tenant
// demands full confinement.
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

enum class CgroupVersion { kNone, kV1, kV2 };

// Which hierarchy is mounted at `root`: kV2 when it holds cgroup.controllers
// (the unified hierarchy), kV1 when it holds controller folders (a hybrid
// host's "unified" folder beside them counts as v1), else kNone.
CgroupVersion DetectCgroupVersion(const std::string& root);

struct CgroupSetup {
  std::vector<std::string> dirs;          // created and limited; the sandbox joins each
  std::vector<std::string> not_enforced;  // one phrase per refused mechanism
  bool can_kill_all = false;              // a directory whose cgroup.procs lists every process
  bool memory_limited = false;            // a memory limit is in force
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
