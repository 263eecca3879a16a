#include "nvml/nvml_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <tuple>

#include "nvml/nvml_api.h"

namespace atrium::nvml {

using namespace api;  // NOLINT: the NVML names read as in NVIDIA's reference

struct NvmlLibrary::Symbols {
  // Required.
  InitFn init = nullptr;
  ShutdownFn shutdown = nullptr;
  ErrorStringFn error_string = nullptr;
  SystemGetDriverVersionFn driver_version = nullptr;
  DeviceGetCountFn device_count = nullptr;
  DeviceGetHandleByIndexFn handle_by_index = nullptr;
  DeviceGetStringFn device_name = nullptr;
  DeviceGetStringFn device_uuid = nullptr;
  DeviceGetMemoryInfoFn memory_info = nullptr;
  // Optional.
  SystemGetCudaDriverVersionFn cuda_version = nullptr;
  DeviceGetMigModeFn mig_mode = nullptr;
  DeviceGetGpuInstanceProfileInfoFn gi_profile_info = nullptr;
  DeviceGetGpuInstancesFn gpu_instances = nullptr;
  GpuInstanceGetInfoFn gi_info = nullptr;
  DeviceGetTemperatureFn temperature = nullptr;
  DeviceGetTemperatureThresholdFn temperature_threshold = nullptr;
  DeviceGetUIntFn power_usage = nullptr;
  DeviceGetUIntFn power_limit = nullptr;
  DeviceGetTotalEccErrorsFn ecc_errors = nullptr;
  DeviceGetRetiredPagesPendingStatusFn retired_pages_pending = nullptr;
  DeviceGetRemappedRowsFn remapped_rows = nullptr;
  DeviceGetP2PStatusFn p2p_status = nullptr;
  EventSetCreateFn event_set_create = nullptr;
  DeviceRegisterEventsFn register_events = nullptr;
  EventSetWaitFn event_set_wait = nullptr;
  EventSetFreeFn event_set_free = nullptr;
};

namespace {

// Bounds on what a (possibly broken) library can make us do.
constexpr unsigned int kMaxGpus = 64;
constexpr unsigned int kMaxInstancesPerProfile = 32;
constexpr int kMaxEventsPerPoll = 4096;

template <typename Fn>
void Resolve(void* handle, const char* name, Fn& out, std::vector<std::string>& missing) {
  dlerror();
  out = reinterpret_cast<Fn>(dlsym(handle, name));
  if (out == nullptr) missing.emplace_back(name);
}

// A NUL-terminated copy of what NVML wrote into `buffer` (it may not
// terminate a string that fills the buffer).
std::string TextOf(const char* buffer, size_t size) {
  return std::string(buffer, strnlen(buffer, size));
}

}  // namespace

std::string CudaVersionText(int version) {
  if (version <= 0) return "";
  return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

NvmlLibrary::NvmlLibrary(void* handle, std::unique_ptr<Symbols> symbols,
                         std::vector<std::string> missing)
    : handle_(handle), symbols_(std::move(symbols)), missing_symbols_(std::move(missing)) {}

NvmlLibrary::~NvmlLibrary() {
  if (event_set_ != nullptr && symbols_->event_set_free != nullptr) {
    symbols_->event_set_free(static_cast<nvmlEventSet_t>(event_set_));
  }
  symbols_->shutdown();
  dlclose(handle_);
}

Error NvmlLibrary::NvmlError(const std::string& call, int rc) const {
  const char* words = symbols_->error_string != nullptr ? symbols_->error_string(rc) : nullptr;
  std::string message = call + " failed: " + (words != nullptr ? words : "unknown error") +
                        " (NVML error " + std::to_string(rc) + ")";
  if (rc == NVML_ERROR_NO_PERMISSION) return Error::PermissionDenied(std::move(message));
  return Error::Unavailable(std::move(message));
}

Result<std::unique_ptr<NvmlLibrary>> NvmlLibrary::Open(const std::string& path) {
  if (path.empty()) return Error::InvalidArgument("the NVML library path is empty");
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Error::NotFound("cannot load NVML from '" + path +
                           "': " + (why != nullptr ? why : "dlopen failed"));
  }
  auto symbols = std::make_unique<Symbols>();
  std::vector<std::string> missing_required;
  Resolve(handle, "nvmlInit_v2", symbols->init, missing_required);
  Resolve(handle, "nvmlShutdown", symbols->shutdown, missing_required);
  Resolve(handle, "nvmlErrorString", symbols->error_string, missing_required);
  Resolve(handle, "nvmlSystemGetDriverVersion", symbols->driver_version, missing_required);
  Resolve(handle, "nvmlDeviceGetCount_v2", symbols->device_count, missing_required);
  Resolve(handle, "nvmlDeviceGetHandleByIndex_v2", symbols->handle_by_index, missing_required);
  Resolve(handle, "nvmlDeviceGetName", symbols->device_name, missing_required);
  Resolve(handle, "nvmlDeviceGetUUID", symbols->device_uuid, missing_required);
  Resolve(handle, "nvmlDeviceGetMemoryInfo", symbols->memory_info, missing_required);
  if (!missing_required.empty()) {
    dlclose(handle);
    std::string names;
    for (const std::string& n : missing_required) names += (names.empty() ? "" : ", ") + n;
    return Error::FailedPrecondition("the NVML library '" + path +
                                     "' lacks required symbols: " + names);
  }
  std::vector<std::string> missing;
  Resolve(handle, "nvmlSystemGetCudaDriverVersion_v2", symbols->cuda_version, missing);
  Resolve(handle, "nvmlDeviceGetMigMode", symbols->mig_mode, missing);
  Resolve(handle, "nvmlDeviceGetGpuInstanceProfileInfo", symbols->gi_profile_info, missing);
  Resolve(handle, "nvmlDeviceGetGpuInstances", symbols->gpu_instances, missing);
  Resolve(handle, "nvmlGpuInstanceGetInfo", symbols->gi_info, missing);
  Resolve(handle, "nvmlDeviceGetTemperature", symbols->temperature, missing);
  Resolve(handle, "nvmlDeviceGetTemperatureThreshold", symbols->temperature_threshold, missing);
  Resolve(handle, "nvmlDeviceGetPowerUsage", symbols->power_usage, missing);
  Resolve(handle, "nvmlDeviceGetEnforcedPowerLimit", symbols->power_limit, missing);
  Resolve(handle, "nvmlDeviceGetTotalEccErrors", symbols->ecc_errors, missing);
  Resolve(handle, "nvmlDeviceGetRetiredPagesPendingStatus", symbols->retired_pages_pending,
          missing);
  Resolve(handle, "nvmlDeviceGetRemappedRows", symbols->remapped_rows, missing);
  Resolve(handle, "nvmlDeviceGetP2PStatus", symbols->p2p_status, missing);
  Resolve(handle, "nvmlEventSetCreate", symbols->event_set_create, missing);
  Resolve(handle, "nvmlDeviceRegisterEvents", symbols->register_events, missing);
  Resolve(handle, "nvmlEventSetWait_v2", symbols->event_set_wait, missing);
  Resolve(handle, "nvmlEventSetFree", symbols->event_set_free, missing);

  if (int rc = symbols->init(); rc != NVML_SUCCESS) {
    // Not initialised, so no nvmlShutdown; nvmlErrorString needs no init.
    const char* words = symbols->error_string(rc);
    std::string message = "nvmlInit_v2 failed: " + std::string(words ? words : "unknown error") +
                          " (NVML error " + std::to_string(rc) + ")";
    dlclose(handle);
    if (rc == NVML_ERROR_NO_PERMISSION) return Error::PermissionDenied(std::move(message));
    return Error::Unavailable(std::move(message));
  }
  std::unique_ptr<NvmlLibrary> library(
      new NvmlLibrary(handle, std::move(symbols), std::move(missing)));
  library->RegisterXidEvents();
  return library;
}

void NvmlLibrary::RegisterXidEvents() {
  const Symbols& s = *symbols_;
  if (!s.event_set_create || !s.register_events || !s.event_set_wait || !s.event_set_free) {
    xid_notes_.push_back("XID events: the library offers no event API");
    return;
  }
  nvmlEventSet_t set = nullptr;
  if (int rc = s.event_set_create(&set); rc != NVML_SUCCESS) {
    xid_notes_.push_back("XID events: " + NvmlError("nvmlEventSetCreate", rc).message);
    return;
  }
  unsigned int count = 0;
  if (s.device_count(&count) != NVML_SUCCESS) count = 0;
  int registered = 0;
  for (unsigned int i = 0; i < std::min(count, kMaxGpus); ++i) {
    nvmlDevice_t device = nullptr;
    if (s.handle_by_index(i, &device) != NVML_SUCCESS) continue;
    if (int rc = s.register_events(device, nvmlEventTypeXidCriticalError, set);
        rc != NVML_SUCCESS) {
      xid_notes_.push_back("XID events on GPU " + std::to_string(i) + ": " +
                           NvmlError("nvmlDeviceRegisterEvents", rc).message);
      continue;
    }
    ++registered;
  }
  if (registered == 0) {
    s.event_set_free(set);
    return;
  }
  event_set_ = set;
}

Result<std::map<unsigned int, std::vector<unsigned long long>>> NvmlLibrary::PollXidErrors() {
  std::map<unsigned int, std::vector<unsigned long long>> out;
  if (event_set_ == nullptr) return out;
  const Symbols& s = *symbols_;
  // Handles are stable while NVML stays initialised: map them back to
  // indexes once per poll.
  std::map<nvmlDevice_t, unsigned int> index_of;
  unsigned int count = 0;
  if (int rc = s.device_count(&count); rc != NVML_SUCCESS) {
    return NvmlError("nvmlDeviceGetCount_v2", rc);
  }
  for (unsigned int i = 0; i < std::min(count, kMaxGpus); ++i) {
    nvmlDevice_t device = nullptr;
    if (s.handle_by_index(i, &device) == NVML_SUCCESS) index_of[device] = i;
  }
  for (int n = 0; n < kMaxEventsPerPoll; ++n) {
    nvmlEventData_t data{};
    int rc = s.event_set_wait(static_cast<nvmlEventSet_t>(event_set_), &data, 0);
    if (rc == NVML_ERROR_TIMEOUT) break;
    if (rc != NVML_SUCCESS) return NvmlError("nvmlEventSetWait_v2", rc);
    if ((data.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
    auto it = index_of.find(data.device);
    if (it == index_of.end()) continue;  // a device we did not register
    out[it->second].push_back(data.eventData);
  }
  return out;
}

Result<DiscoveredHost> NvmlLibrary::Discover() {
  const Symbols& s = *symbols_;
  DiscoveredHost host;
  host.missing_symbols = missing_symbols_;
  host.unavailable = xid_notes_;

  char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
  if (int rc = s.driver_version(version, sizeof version); rc != NVML_SUCCESS) {
    return NvmlError("nvmlSystemGetDriverVersion", rc);
  }
  host.driver_version = TextOf(version, sizeof version);
  if (s.cuda_version != nullptr) {
    int cuda = 0;
    if (int rc = s.cuda_version(&cuda); rc == NVML_SUCCESS) {
      host.cuda_driver_version = CudaVersionText(cuda);
    } else {
      host.unavailable.push_back("CUDA driver version: " +
                                 NvmlError("nvmlSystemGetCudaDriverVersion_v2", rc).message);
    }
  }

  unsigned int count = 0;
  if (int rc = s.device_count(&count); rc != NVML_SUCCESS) {
    return NvmlError("nvmlDeviceGetCount_v2", rc);
  }
  if (count > kMaxGpus) {
    return Error::Unavailable("NVML reports " + std::to_string(count) + " GPUs, more than the " +
                              std::to_string(kMaxGpus) + " a node may have");
  }
  std::vector<nvmlDevice_t> devices(count, nullptr);
  for (unsigned int i = 0; i < count; ++i) {
    const std::string gpu = " (GPU " + std::to_string(i) + ")";
    if (int rc = s.handle_by_index(i, &devices[i]); rc != NVML_SUCCESS) {
      return NvmlError("nvmlDeviceGetHandleByIndex_v2" + gpu, rc);
    }
    nvmlDevice_t device = devices[i];
    DiscoveredGpu g;
    g.index = i;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (int rc = s.device_name(device, name, sizeof name); rc != NVML_SUCCESS) {
      return NvmlError("nvmlDeviceGetName" + gpu, rc);
    }
    g.name = TextOf(name, sizeof name);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (int rc = s.device_uuid(device, uuid, sizeof uuid); rc != NVML_SUCCESS) {
      return NvmlError("nvmlDeviceGetUUID" + gpu, rc);
    }
    g.uuid = TextOf(uuid, sizeof uuid);
    nvmlMemory_t memory{};
    if (int rc = s.memory_info(device, &memory); rc != NVML_SUCCESS) {
      return NvmlError("nvmlDeviceGetMemoryInfo" + gpu, rc);
    }
    g.memory_mib = static_cast<int64_t>(memory.total / (1024 * 1024));

    auto note = [&](const std::string& what, const std::string& call, int rc) {
      g.unavailable.push_back(what + ": " + NvmlError(call, rc).message);
    };

    // MIG: the current mode (a pending change applies only after a reset)
    // and, when on, the GPU instances that exist now.
    if (s.mig_mode != nullptr) {
      unsigned int current = 0, pending = 0;
      if (int rc = s.mig_mode(device, &current, &pending); rc == NVML_SUCCESS) {
        g.mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
      } else {
        note("MIG mode", "nvmlDeviceGetMigMode", rc);
      }
    }
    if (g.mig_enabled.value_or(false)) {
      if (!s.gi_profile_info || !s.gpu_instances || !s.gi_info) {
        g.unavailable.push_back("MIG instances: the library lacks the GPU instance queries");
      } else {
        std::set<unsigned int> seen_profiles;
        for (unsigned int index = 0; index < kGpuInstanceProfileIndexLimit; ++index) {
          nvmlGpuInstanceProfileInfo_t info{};
          int rc = s.gi_profile_info(device, index, &info);
          if (rc == NVML_ERROR_INVALID_ARGUMENT || rc == NVML_ERROR_NOT_SUPPORTED) continue;
          if (rc != NVML_SUCCESS) {
            note("MIG profile index " + std::to_string(index),
                 "nvmlDeviceGetGpuInstanceProfileInfo", rc);
            continue;
          }
          if (!seen_profiles.insert(info.id).second) continue;
          nvmlGpuInstance_t instances[kMaxInstancesPerProfile] = {};
          unsigned int found = kMaxInstancesPerProfile;
          rc = s.gpu_instances(device, info.id, instances, &found);
          if (rc != NVML_SUCCESS) {
            note("MIG instances of profile " + std::to_string(info.id), "nvmlDeviceGetGpuInstances",
                 rc);
            continue;
          }
          for (unsigned int k = 0; k < std::min(found, kMaxInstancesPerProfile); ++k) {
            nvmlGpuInstanceInfo_t gi{};
            if (int info_rc = s.gi_info(instances[k], &gi); info_rc != NVML_SUCCESS) {
              note("MIG instance", "nvmlGpuInstanceGetInfo", info_rc);
              continue;
            }
            g.mig_instances.push_back({.id = gi.id,
                                       .profile_id = gi.profileId,
                                       .start = gi.placement.start,
                                       .size = gi.placement.size});
          }
        }
        std::sort(g.mig_instances.begin(), g.mig_instances.end(),
                  [](const MigInstance& a, const MigInstance& b) {
                    return std::tie(a.start, a.id) < std::tie(b.start, b.id);
                  });
      }
    }

    // Health signals; each optional.
    GpuHealthSignals& h = g.health;
    if (s.ecc_errors != nullptr) {
      unsigned long long errors = 0;
      int rc = s.ecc_errors(device, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors);
      if (rc == NVML_SUCCESS) {
        h.ecc_uncorrected_volatile = errors;
      } else {
        note("ECC errors", "nvmlDeviceGetTotalEccErrors", rc);
      }
    }
    if (s.retired_pages_pending != nullptr) {
      int pending = 0;
      if (int rc = s.retired_pages_pending(device, &pending); rc == NVML_SUCCESS) {
        h.retired_pages_pending = pending == NVML_FEATURE_ENABLED;
      } else {
        note("retired pages", "nvmlDeviceGetRetiredPagesPendingStatus", rc);
      }
    }
    if (s.remapped_rows != nullptr) {
      unsigned int corrected = 0, uncorrected = 0, pending = 0, failed = 0;
      if (int rc = s.remapped_rows(device, &corrected, &uncorrected, &pending, &failed);
          rc == NVML_SUCCESS) {
        h.remapped_rows_pending = pending != 0;
        h.remapped_rows_failed = failed != 0;
      } else {
        note("remapped rows", "nvmlDeviceGetRemappedRows", rc);
      }
    }
    if (s.temperature != nullptr) {
      unsigned int celsius = 0;
      if (int rc = s.temperature(device, NVML_TEMPERATURE_GPU, &celsius); rc == NVML_SUCCESS) {
        h.temperature_c = celsius;
      } else {
        note("temperature", "nvmlDeviceGetTemperature", rc);
      }
    }
    if (s.temperature_threshold != nullptr) {
      unsigned int celsius = 0;
      int rc = s.temperature_threshold(device, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &celsius);
      if (rc == NVML_SUCCESS) {
        h.slowdown_temperature_c = celsius;
      } else {
        note("slowdown temperature", "nvmlDeviceGetTemperatureThreshold", rc);
      }
      rc = s.temperature_threshold(device, NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, &celsius);
      if (rc == NVML_SUCCESS) {
        h.shutdown_temperature_c = celsius;
      } else {
        note("shutdown temperature", "nvmlDeviceGetTemperatureThreshold", rc);
      }
    }
    if (s.power_usage != nullptr) {
      unsigned int mw = 0;
      if (int rc = s.power_usage(device, &mw); rc == NVML_SUCCESS) {
        h.power_mw = mw;
      } else {
        note("power usage", "nvmlDeviceGetPowerUsage", rc);
      }
    }
    if (s.power_limit != nullptr) {
      unsigned int mw = 0;
      if (int rc = s.power_limit(device, &mw); rc == NVML_SUCCESS) {
        h.power_limit_mw = mw;
      } else {
        note("power limit", "nvmlDeviceGetEnforcedPowerLimit", rc);
      }
    }
    host.gpus.push_back(std::move(g));
  }

  // XIDs delivered since Open (or the last poll).
  ATRIUM_ASSIGN_OR_RETURN(auto xids, PollXidErrors());
  for (auto& [index, list] : xids) {
    if (index < host.gpus.size()) host.gpus[index].health.xid_errors = std::move(list);
  }

  // NVLink groups: GPUs that reach each other over NVLink, transitively.
  if (s.p2p_status != nullptr && count > 1) {
    std::vector<int> parent(count);
    std::iota(parent.begin(), parent.end(), 0);
    auto root = [&](int x) {
      while (parent[x] != x) x = parent[x] = parent[parent[x]];
      return x;
    };
    std::vector<bool> linked(count, false);
    for (unsigned int a = 0; a < count; ++a) {
      for (unsigned int b = a + 1; b < count; ++b) {
        int status = -1;
        int rc = s.p2p_status(devices[a], devices[b], NVML_P2P_CAPS_INDEX_NVLINK, &status);
        if (rc != NVML_SUCCESS) {
          host.unavailable.push_back("NVLink between GPU " + std::to_string(a) + " and " +
                                     std::to_string(b) + ": " +
                                     NvmlError("nvmlDeviceGetP2PStatus", rc).message);
          continue;
        }
        if (status != NVML_P2P_STATUS_OK) continue;
        linked[a] = linked[b] = true;
        parent[root(static_cast<int>(a))] = root(static_cast<int>(b));
      }
    }
    std::map<int, std::vector<int>> groups;
    for (unsigned int i = 0; i < count; ++i) {
      if (linked[i]) groups[root(static_cast<int>(i))].push_back(static_cast<int>(i));
    }
    for (auto& [unused, members] : groups) host.nvlink_groups.push_back(std::move(members));
    std::sort(host.nvlink_groups.begin(), host.nvlink_groups.end());
  }
  return host;
}

}  // namespace atrium::nvml
