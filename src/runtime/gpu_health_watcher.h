// While a control plane runs on its host's GPUs (runtime/fleet_discovery.h),
// reads their health through NVML again every interval and takes a GPU that
// turned unhealthy out of placement (SchedulingService::SetGpuHealth, actor
// kGpuHealthActor, NVML's reasons as the reason): its preemptible work is
// preempted and the rest asked to move, as when an operator marks it. It
// never marks a GPU healthy: an operator does, after looking.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "nvml/node_mapping.h"
#include "nvml/nvml_library.h"
#include "scheduling/scheduling_service.h"
#include "threads/periodic_thread.h"

namespace atrium {

inline constexpr char kGpuHealthActor[] = "system:nvml";

class GpuHealthWatcher {
 public:
  // `node` is the host's node in the fleet; `unhealthy_at_start` the GPU
  // indexes discovery already found unhealthy (not reported again).
  // interval_ms 0: no timer (tests call CheckOnce). Both references must
  // outlive the watcher.
  GpuHealthWatcher(nvml::NvmlLibrary& library, scheduling::SchedulingService& scheduling,
                   std::string node, std::set<int> unhealthy_at_start, int64_t interval_ms);
  ~GpuHealthWatcher();
  GpuHealthWatcher(const GpuHealthWatcher&) = delete;
  GpuHealthWatcher& operator=(const GpuHealthWatcher&) = delete;

  // Starts the timer thread (when interval_ms > 0).
  void Start();
  // Stops it; idempotent. Call before the scheduling service stops.
  void Stop();

  // One reading: the GPUs newly found unhealthy, each marked so. Errors:
  // NVML's (the reading failed; nothing is marked), the scheduler's.
  Result<std::vector<int>> CheckOnce();

 private:
  nvml::NvmlLibrary& library_;
  scheduling::SchedulingService& scheduling_;
  const std::string node_;

  std::mutex check_mu_;     // one reading at a time (NvmlLibrary is not thread-safe)
  std::set<int> reported_;  // guarded by check_mu_
  PeriodicThread timer_;    // last: stopped before the rest goes
};

}  // namespace atrium
