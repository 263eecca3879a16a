// A fake libnvidia-ml for tests, written from NVIDIA's NVML API Reference
// Guide: it exports the same (ABI-versioned) symbol names with the same C
// signatures, and answers from a JSON file named by FAKE_NVML_CONFIG, read
// at nvmlInit_v2:
//
//   {"init_error": 0, "driver_version": "550.54.15", "cuda_driver_version": 12040,
//    "device_count_error": 0,
//    "devices": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...",
//                 "memory_total_bytes": 85520809984,
//                 "mig_mode": 1,                        // absent: NOT_SUPPORTED
//                 "gpu_instances": [{"profile_id": 9, "start": 0}],
//                 "ecc_uncorrected_volatile": 0, "retired_pages_pending": false,
//                 "remapped_rows_pending": false, "remapped_rows_failed": false,
//                 "temperature_c": 40, "slowdown_c": 87, "shutdown_c": 92,
//                 "power_mw": 70000, "power_limit_mw": 700000,
//                 "nvlink_peers": [1], "xid_errors": [79],
//                 "errors": {"nvmlDeviceGetTotalEccErrors": 3}}]}
//
// Each nvmlDeviceGetCount_v2 reads the file again and takes the devices'
// answers from it (the devices themselves, their handles and MIG instances
// stay as nvmlInit_v2 made them), so a test can change a GPU's health while
// the library is loaded. "errors" makes one function return that NVML code
// for that device. Which
// symbols exist is fixed when the library is built (dlsym sees every export):
// FAKE_NVML_OLD_DRIVER leaves out the newer optional symbols (MIG, row
// remapping, the _v2 CUDA version, and the event API with its _v2 wait), as
// an old driver lacks them; FAKE_NVML_NO_COUNT_V2 exports the v1
// nvmlDeviceGetCount instead of the required nvmlDeviceGetCount_v2. Only the NVML functions are
// exported
// (-fvisibility=hidden), so the JSON library inside never clashes with the
// process that loads this one.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Json = nlohmann::json;

constexpr int kSuccess = 0;
constexpr int kUninitialized = 1;
constexpr int kInvalidArgument = 2;
constexpr int kNotSupported = 3;
constexpr int kInsufficientSize = 7;
constexpr int kTimeout = 10;
constexpr int kUnknown = 999;

struct FakeGpuInstance;

struct FakeDevice {
  Json config;
  std::vector<std::unique_ptr<FakeGpuInstance>> instances;
};

struct FakeGpuInstance {
  FakeDevice* device;
  unsigned int id;
  unsigned int profile_id;
  unsigned int start;
  unsigned int size;
};

struct FakeEventData {  // nvmlEventData_t
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct FakeEventSet {
  std::deque<FakeEventData> pending;
};

struct State {
  bool initialized = false;
  Json config;
  std::vector<std::unique_ptr<FakeDevice>> devices;
};

State& TheState() {
  static State state;
  return state;
}

// The GPU instance profiles of an H100/A100 by NVML profile index, as
// `nvidia-smi mig -lgip` lists them: {index, id, memory slots}.
struct ProfileRow {
  unsigned int index, id, slices, size, instances;
};
constexpr ProfileRow kProfiles[] = {
    {0, 19, 1, 1, 7},  // NVML_GPU_INSTANCE_PROFILE_1_SLICE: 1g.10gb
    {1, 14, 2, 2, 3},  // 2_SLICE: 2g.20gb
    {2, 9, 3, 4, 2},   // 3_SLICE: 3g.40gb
    {3, 5, 4, 4, 1},   // 4_SLICE: 4g.40gb
    {4, 0, 7, 8, 1},   // 7_SLICE: 7g.80gb
    {7, 20, 1, 1, 1},  // 1_SLICE_REV1: 1g.10gb+me
    {9, 15, 1, 2, 4},  // 1_SLICE_REV2: 1g.20gb
};
constexpr unsigned int kKnownProfileIndexes = 10;  // indexes past these: INVALID_ARGUMENT

// The code `function` is told to fail with on `device`, or success.
int ConfiguredError(const FakeDevice* device, const char* function) {
  if (device == nullptr) return kSuccess;
  auto errors = device->config.find("errors");
  if (errors == device->config.end() || !errors->contains(function)) return kSuccess;
  return (*errors)[function].get<int>();
}

FakeDevice* DeviceOf(void* handle) {
  for (auto& d : TheState().devices) {
    if (d.get() == handle) return d.get();
  }
  return nullptr;
}

int CopyString(const std::string& text, char* out, unsigned int length) {
  if (out == nullptr) return kInvalidArgument;
  if (text.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return kSuccess;
}

// Common prologue of a device query: initialised, a known device, no
// configured error. Returns the code to return, or kSuccess to go on.
int Check(void* handle, const char* function, FakeDevice** device) {
  if (!TheState().initialized) return kUninitialized;
  *device = DeviceOf(handle);
  if (*device == nullptr) return kInvalidArgument;
  return ConfiguredError(*device, function);
}

}  // namespace

FAKE_EXPORT const char* nvmlErrorString(int result) {
  switch (result) {
    case 0:
      return "Success";
    case 1:
      return "Uninitialized";
    case 2:
      return "Invalid Argument";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 6:
      return "Not Found";
    case 7:
      return "Insufficient Size";
    case 9:
      return "Driver Not Loaded";
    case 10:
      return "Timeout";
    case 15:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

FAKE_EXPORT int nvmlInit_v2() {
  State& s = TheState();
  const char* path = std::getenv("FAKE_NVML_CONFIG");
  if (path == nullptr) return kUnknown;
  std::ifstream in(path);
  if (!in) return kUnknown;
  Json config = Json::parse(in, nullptr, false);
  if (config.is_discarded()) return kUnknown;
  if (int rc = config.value("init_error", 0); rc != kSuccess) return rc;
  s.config = config;
  s.devices.clear();
  for (const Json& d : config.value("devices", Json::array())) {
    auto device = std::make_unique<FakeDevice>();
    device->config = d;
    unsigned int next_id = 1;
    for (const Json& gi : d.value("gpu_instances", Json::array())) {
      unsigned int profile = gi.at("profile_id").get<unsigned int>();
      unsigned int size = 0;
      for (const ProfileRow& row : kProfiles) {
        if (row.id == profile) size = row.size;
      }
      device->instances.push_back(std::make_unique<FakeGpuInstance>(FakeGpuInstance{
          device.get(), next_id++, profile, gi.at("start").get<unsigned int>(), size}));
    }
    s.devices.push_back(std::move(device));
  }
  s.initialized = true;
  return kSuccess;
}

FAKE_EXPORT int nvmlShutdown() {
  State& s = TheState();
  if (!s.initialized) return kUninitialized;
  s.initialized = false;
  s.devices.clear();
  return kSuccess;
}

FAKE_EXPORT int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  if (!TheState().initialized) return kUninitialized;
  return CopyString(TheState().config.value("driver_version", "550.54.15"), version, length);
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_EXPORT int nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (!TheState().initialized) return kUninitialized;
  if (version == nullptr) return kInvalidArgument;
  *version = TheState().config.value("cuda_driver_version", 12040);
  return kSuccess;
}
#endif

#ifndef FAKE_NVML_NO_COUNT_V2
FAKE_EXPORT int nvmlDeviceGetCount_v2(unsigned int* count) {
#else
FAKE_EXPORT int nvmlDeviceGetCount(unsigned int* count) {
#endif
  State& s = TheState();
  if (!s.initialized) return kUninitialized;
  if (count == nullptr) return kInvalidArgument;
  if (int rc = s.config.value("device_count_error", 0); rc != kSuccess) return rc;
  if (const char* path = std::getenv("FAKE_NVML_CONFIG")) {
    std::ifstream in(path);
    Json now = in ? Json::parse(in, nullptr, false) : Json();
    if (now.is_object()) {
      const Json devices = now.value("devices", Json::array());
      for (size_t i = 0; i < s.devices.size() && i < devices.size(); ++i) {
        s.devices[i]->config = devices[i];
      }
    }
  }
  *count = static_cast<unsigned int>(s.devices.size());
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  State& s = TheState();
  if (!s.initialized) return kUninitialized;
  if (device == nullptr || index >= s.devices.size()) return kInvalidArgument;
  if (int rc = ConfiguredError(s.devices[index].get(), "nvmlDeviceGetHandleByIndex_v2")) return rc;
  *device = s.devices[index].get();
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetName(void* handle, char* name, unsigned int length) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetName", &d)) return rc;
  return CopyString(d->config.value("name", ""), name, length);
}

FAKE_EXPORT int nvmlDeviceGetUUID(void* handle, char* uuid, unsigned int length) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetUUID", &d)) return rc;
  return CopyString(d->config.value("uuid", ""), uuid, length);
}

FAKE_EXPORT int nvmlDeviceGetMemoryInfo(void* handle, unsigned long long* memory) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetMemoryInfo", &d)) return rc;
  if (memory == nullptr) return kInvalidArgument;
  memory[0] = d->config.value("memory_total_bytes", 0ULL);  // total
  memory[1] = memory[0];                                    // free
  memory[2] = 0;                                            // used
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetTemperature(void* handle, int sensor, unsigned int* temp) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetTemperature", &d)) return rc;
  if (sensor != 0 || temp == nullptr) return kInvalidArgument;
  if (!d->config.contains("temperature_c")) return kNotSupported;
  *temp = d->config["temperature_c"].get<unsigned int>();
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetTemperatureThreshold(void* handle, int threshold, unsigned int* temp) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetTemperatureThreshold", &d)) return rc;
  if (temp == nullptr) return kInvalidArgument;
  const char* key = threshold == 0 ? "shutdown_c" : threshold == 1 ? "slowdown_c" : nullptr;
  if (key == nullptr || !d->config.contains(key)) return kNotSupported;
  *temp = d->config[key].get<unsigned int>();
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetPowerUsage(void* handle, unsigned int* power) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetPowerUsage", &d)) return rc;
  if (power == nullptr) return kInvalidArgument;
  if (!d->config.contains("power_mw")) return kNotSupported;
  *power = d->config["power_mw"].get<unsigned int>();
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetEnforcedPowerLimit(void* handle, unsigned int* limit) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetEnforcedPowerLimit", &d)) return rc;
  if (limit == nullptr) return kInvalidArgument;
  if (!d->config.contains("power_limit_mw")) return kNotSupported;
  *limit = d->config["power_limit_mw"].get<unsigned int>();
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetTotalEccErrors(void* handle, int error_type, int counter_type,
                                            unsigned long long* count) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetTotalEccErrors", &d)) return rc;
  if (count == nullptr || error_type != 1 || counter_type != 0) return kInvalidArgument;
  *count = d->config.value("ecc_uncorrected_volatile", 0ULL);
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetRetiredPagesPendingStatus(void* handle, int* pending) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetRetiredPagesPendingStatus", &d)) return rc;
  if (pending == nullptr) return kInvalidArgument;
  *pending = d->config.value("retired_pages_pending", false) ? 1 : 0;
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetP2PStatus(void* a, void* b, int caps_index, int* status) {
  FakeDevice* first = nullptr;
  if (int rc = Check(a, "nvmlDeviceGetP2PStatus", &first)) return rc;
  FakeDevice* second = DeviceOf(b);
  if (second == nullptr || status == nullptr || caps_index != 2) return kInvalidArgument;
  size_t second_index = 0;
  for (size_t i = 0; i < TheState().devices.size(); ++i) {
    if (TheState().devices[i].get() == second) second_index = i;
  }
  *status = 4;  // NVML_P2P_STATUS_NOT_SUPPORTED
  for (const Json& peer : first->config.value("nvlink_peers", Json::array())) {
    if (peer.get<size_t>() == second_index) *status = 0;  // NVML_P2P_STATUS_OK
  }
  return kSuccess;
}

#ifndef FAKE_NVML_OLD_DRIVER
FAKE_EXPORT int nvmlDeviceGetRemappedRows(void* handle, unsigned int* corrected,
                                          unsigned int* uncorrected, unsigned int* pending,
                                          unsigned int* failed) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetRemappedRows", &d)) return rc;
  if (!corrected || !uncorrected || !pending || !failed) return kInvalidArgument;
  *corrected = 0;
  *uncorrected = 0;
  *pending = d->config.value("remapped_rows_pending", false) ? 1 : 0;
  *failed = d->config.value("remapped_rows_failed", false) ? 1 : 0;
  return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetMigMode(void* handle, unsigned int* current, unsigned int* pending) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetMigMode", &d)) return rc;
  if (current == nullptr || pending == nullptr) return kInvalidArgument;
  if (!d->config.contains("mig_mode")) return kNotSupported;
  *current = d->config["mig_mode"].get<unsigned int>();
  *pending = *current;
  return kSuccess;
}

// nvmlGpuInstanceProfileInfo_t (v1).
struct FakeProfileInfo {
  unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
};

FAKE_EXPORT int nvmlDeviceGetGpuInstanceProfileInfo(void* handle, unsigned int profile,
                                                    FakeProfileInfo* info) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetGpuInstanceProfileInfo", &d)) return rc;
  if (info == nullptr || profile >= kKnownProfileIndexes) return kInvalidArgument;
  if (!d->config.contains("mig_mode")) return kNotSupported;
  for (const ProfileRow& row : kProfiles) {
    if (row.index != profile) continue;
    *info = FakeProfileInfo{row.id, 0, row.slices, row.instances,      0, 0, 0,
                            0,      0, 0,          row.size * 10240ULL};
    return kSuccess;
  }
  return kNotSupported;
}

FAKE_EXPORT int nvmlDeviceGetGpuInstances(void* handle, unsigned int profile_id,
                                          FakeGpuInstance** instances, unsigned int* count) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceGetGpuInstances", &d)) return rc;
  if (instances == nullptr || count == nullptr) return kInvalidArgument;
  unsigned int n = 0;
  for (auto& gi : d->instances) {
    if (gi->profile_id == profile_id) instances[n++] = gi.get();
  }
  *count = n;
  return kSuccess;
}

// nvmlGpuInstanceInfo_t.
struct FakeGpuInstanceInfo {
  void* device;
  unsigned int id;
  unsigned int profileId;
  unsigned int start;
  unsigned int size;
};

FAKE_EXPORT int nvmlGpuInstanceGetInfo(FakeGpuInstance* instance, FakeGpuInstanceInfo* info) {
  if (!TheState().initialized) return kUninitialized;
  if (instance == nullptr || info == nullptr) return kInvalidArgument;
  if (int rc = ConfiguredError(instance->device, "nvmlGpuInstanceGetInfo")) return rc;
  *info = FakeGpuInstanceInfo{instance->device, instance->id, instance->profile_id, instance->start,
                              instance->size};
  return kSuccess;
}

FAKE_EXPORT int nvmlEventSetCreate(FakeEventSet** set) {
  if (!TheState().initialized) return kUninitialized;
  if (set == nullptr) return kInvalidArgument;
  *set = new FakeEventSet();
  return kSuccess;
}

// The XIDs a device's config lists "occur" once it is registered.
FAKE_EXPORT int nvmlDeviceRegisterEvents(void* handle, unsigned long long types,
                                         FakeEventSet* set) {
  FakeDevice* d = nullptr;
  if (int rc = Check(handle, "nvmlDeviceRegisterEvents", &d)) return rc;
  if (set == nullptr) return kInvalidArgument;
  if ((types & 0x8ULL) == 0) return kSuccess;
  for (const Json& xid : d->config.value("xid_errors", Json::array())) {
    set->pending.push_back({d, 0x8ULL, xid.get<unsigned long long>(), 0xFFFFFFFFu, 0xFFFFFFFFu});
  }
  return kSuccess;
}

FAKE_EXPORT int nvmlEventSetWait_v2(FakeEventSet* set, FakeEventData* data, unsigned int) {
  if (!TheState().initialized) return kUninitialized;
  if (set == nullptr || data == nullptr) return kInvalidArgument;
  if (set->pending.empty()) return kTimeout;
  *data = set->pending.front();
  set->pending.pop_front();
  return kSuccess;
}

FAKE_EXPORT int nvmlEventSetFree(FakeEventSet* set) {
  if (set == nullptr) return kInvalidArgument;
  delete set;
  return kSuccess;
}
#endif  // FAKE_NVML_OLD_DRIVER
