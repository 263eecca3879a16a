#include "exec/backend.h"

namespace atrium::exec {

std::vector<std::pair<std::string, std::string>> ShareEnvironment(const GpuGrant& grant) {
  std::vector<std::pair<std::string, std::string>> env;
  if (grant.share_milli <= 0 || !grant.mig_profile.empty()) return env;
  env.emplace_back("ATRIUM_GPU_SHARE_MILLI", std::to_string(grant.share_milli));
  env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                   std::to_string((static_cast<int64_t>(grant.share_milli) + 9) / 10));
  if (grant.memory_cap_mib > 0) {
    env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                     "0=" + std::to_string(grant.memory_cap_mib) + "MB");
  }
  return env;
}

std::string_view PhaseName(WorkloadPhase phase) {
  switch (phase) {
    case WorkloadPhase::kStarting:
      return "starting";
    case WorkloadPhase::kRunning:
      return "running";
    case WorkloadPhase::kExited:
      return "exited";
    case WorkloadPhase::kLost:
      return "lost";
  }
  return "lost";
}

Result<std::map<std::string, WorkloadStatus>> ExecutionBackend::InspectMany(
    const std::vector<std::string>& workload_ids) {
  std::map<std::string, WorkloadStatus> found;
  for (const std::string& id : workload_ids) {
    auto status = Inspect(id);
    if (status.has_value()) {
      found.emplace(id, std::move(*status));
    } else if (status.error().code != ErrorCode::kNotFound) {
      return std::move(status).error();
    }
  }
  return found;
}

}  // namespace atrium::exec
