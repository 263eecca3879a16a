// What the API shows of the fleet: nodes, GPUs, who holds what on them and
// the free capacity per pool, model and MIG profile. Pure: computed from the
// scheduler's state, which the caller must hold still (SchedulingService
// calls these under its lock).
//
// Visibility: a report for a tenant lists only that tenant's allocations on
// the GPUs it shows; usage figures (used milli, free GPUs) count everyone's,
// since free capacity is what every tenant may see.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/scheduler.h"

namespace atrium::scheduling {

struct GpuUseInfo {
  std::string allocation_id;
  std::string tenant_id;
  std::string kind;  // gpu | mig | share | node
  int32_t milli = 0;
  int64_t memory_mib = 0;
  std::string mig_profile;  // kind mig
  int mig_start = -1;
};

struct GpuInfo {
  std::string node;
  int index = 0;
  std::string model;
  int64_t memory_mib = 0;
  bool healthy = true;
  bool cordoned = false;
  bool mig_mode = false;  // MIG enabled by the fleet or laid out by the scheduler
  int32_t used_milli = 0;
  int64_t used_memory_mib = 0;
  bool free = false;             // usable and holding nothing
  std::vector<GpuUseInfo> uses;  // the viewer's (all for the platform); never scrub holds
  // Part or all of it waits for its scrub after an allocation ended
  // (sched::ScrubHold): no work is placed in that part until it finished.
  bool scrubbing = false;
  // Platform viewers only: the ended allocations whose scrub it waits for.
  std::vector<std::string> scrubbing_for;
  // Why it is unhealthy, when a scrub failed ("scrub failed: ..."); "" otherwise.
  std::string health_reason;
  // One word: unhealthy, scrubbing, cordoned, free or in_use (first that holds).
  std::string state;
};

struct NodeInfo {
  std::string name;
  std::string pool;
  std::string rack;
  std::string site;
  std::string region;
  std::string gpu_model;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t cpu_used_milli = 0;
  int64_t memory_used_mib = 0;
  std::vector<std::vector<int>> nvlink_groups;
  std::string driver_version;  // "" = unknown
  std::string cuda_version;
  bool cordoned = false;
  bool draining = false;
  int gpus_free = 0;
  std::vector<GpuInfo> gpus;
};

struct MigRoom {
  std::string profile;
  int free_instances = 0;  // how many more of only this profile fit, over all GPUs
};

// One (pool, model) pair of the fleet.
struct CapacityRow {
  std::string pool;
  std::string region;
  std::string model;
  int nodes = 0;
  int nodes_schedulable = 0;  // neither cordoned nor draining
  int gpus = 0;
  int gpus_usable = 0;           // healthy, not cordoned, on a schedulable node
  int gpus_free = 0;             // usable and holding nothing
  int64_t free_share_milli = 0;  // room for shares on usable GPUs outside MIG mode
  std::vector<MigRoom> mig;      // MIG-capable models only, in the model's profile order
};

// viewer_tenant "" = the platform (sees every allocation).
NodeInfo DescribeNode(const sched::Scheduler& s, int32_t node, std::string_view viewer_tenant);
std::vector<CapacityRow> DescribeCapacity(const sched::Scheduler& s);

}  // namespace atrium::scheduling
