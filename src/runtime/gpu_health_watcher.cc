#include "runtime/gpu_health_watcher.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace atrium {

GpuHealthWatcher::GpuHealthWatcher(nvml::NvmlLibrary& library,
                                   scheduling::SchedulingService& scheduling, std::string node,
                                   std::set<int> unhealthy_at_start, int64_t interval_ms)
    : library_(library),
      scheduling_(scheduling),
      node_(std::move(node)),
      reported_(std::move(unhealthy_at_start)),
      timer_("gpu-health", interval_ms, [this] {
        if (auto checked = CheckOnce(); !checked) {
          spdlog::warn("GPU health check failed: {}", checked.error().message);
        }
      }) {}

GpuHealthWatcher::~GpuHealthWatcher() { Stop(); }

void GpuHealthWatcher::Start() { timer_.Start(); }

void GpuHealthWatcher::Stop() { timer_.Stop(); }

Result<std::vector<int>> GpuHealthWatcher::CheckOnce() {
  std::lock_guard<std::mutex> lock(check_mu_);
  ATRIUM_ASSIGN_OR_RETURN(nvml::DiscoveredHost host, library_.Discover());
  std::vector<int> marked;
  for (const nvml::DiscoveredGpu& gpu : host.gpus) {
    const int index = static_cast<int>(gpu.index);
    if (reported_.contains(index)) continue;
    nvml::GpuVerdict verdict = nvml::JudgeGpuHealth(gpu);
    if (verdict.healthy) continue;
    std::string reason = "NVML:";
    for (const std::string& r : verdict.reasons) reason += " " + r + ";";
    reason.pop_back();
    RequestOrigin by{.actor = kGpuHealthActor, .actor_role = "", .request_id = "", .source = ""};
    ATRIUM_RETURN_IF_ERROR(scheduling_.SetGpuHealth(by, node_, index, false, reason));
    spdlog::warn("GPU {} of {} is unhealthy and taken out of placement: {}", index, node_, reason);
    reported_.insert(index);
    marked.push_back(index);
  }
  return marked;
}

}  // namespace atrium
