// The few NVML types, constants and function signatures Atrium uses,
// declared here from NVIDIA's NVML API Reference Guide so that the build
// needs no NVIDIA header or library: libnvidia-ml.so.1 is opened with
// dlopen at run time (nvml/nvml_library.h). The symbol names are the
// ABI-versioned ones the real library exports (nvmlInit_v2, not the
// nvmlInit the header's macros rename). Layouts follow the reference's
// struct definitions; a struct the library fills is only ever passed by a
// pointer to one of these, so a layout mistake here is a memory error there:
// add fields only from the reference.
#pragma once

#include <cstdint>

namespace atrium::nvml::api {

using nvmlReturn_t = int;  // an enum in the reference; int-sized in the C ABI

// nvmlReturn_t values (reference, "Error reporting").
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

// Opaque handles.
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

// Buffer sizes (reference, "Constants").
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

// nvmlMemory_t: bytes.
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// MIG (reference, "Multi Instance GPU Management").
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
// GPU instance profile *indexes* (NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0
// ...); nvmlDeviceGetGpuInstanceProfileInfo turns one into the profile *id*
// that nvmlDeviceGetGpuInstances takes and `nvidia-smi mig -lgip` prints.
// Indexes past the ones a driver knows answer INVALID_ARGUMENT or
// NOT_SUPPORTED; 16 covers every index the R590 reference defines.
inline constexpr unsigned int kGpuInstanceProfileIndexLimit = 16;
struct nvmlGpuInstancePlacement_t {
  unsigned int start;
  unsigned int size;
};
struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};
// The v1 layout (no version field), which nvmlDeviceGetGpuInstanceProfileInfo
// fills.
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

// Health (reference, "Device Queries" and "Device Enums").
inline constexpr int NVML_TEMPERATURE_GPU = 0;                 // nvmlTemperatureSensors_t
inline constexpr int NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0;  // nvmlTemperatureThresholds_t
inline constexpr int NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1;
inline constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;  // nvmlMemoryErrorType_t
inline constexpr int NVML_VOLATILE_ECC = 0;                   // nvmlEccCounterType_t
inline constexpr int NVML_FEATURE_ENABLED = 1;                // nvmlEnableState_t
inline constexpr int NVML_P2P_CAPS_INDEX_NVLINK = 2;          // nvmlGpuP2PCapsIndex_t
inline constexpr int NVML_P2P_STATUS_OK = 0;                  // nvmlGpuP2PStatus_t

// Events (reference, "Event Handling Methods").
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// Function types, one per exported symbol used (the name in the comment).
extern "C" {
using InitFn = nvmlReturn_t (*)();                    // nvmlInit_v2
using ShutdownFn = nvmlReturn_t (*)();                // nvmlShutdown
using ErrorStringFn = const char* (*)(nvmlReturn_t);  // nvmlErrorString
using SystemGetDriverVersionFn = nvmlReturn_t (*)(char*, unsigned int);
using SystemGetCudaDriverVersionFn = nvmlReturn_t (*)(int*);  // nvmlSystemGetCudaDriverVersion_v2
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int*);     // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);  // ..._v2
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);   // Name, UUID
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using DeviceGetGpuInstanceProfileInfoFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                           nvmlGpuInstanceProfileInfo_t*);
using DeviceGetGpuInstancesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlGpuInstance_t*,
                                                 unsigned int*);
using GpuInstanceGetInfoFn = nvmlReturn_t (*)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*);
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetTemperatureThresholdFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned int*);
using DeviceGetUIntFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);  // power usage / limit
using DeviceGetTotalEccErrorsFn = nvmlReturn_t (*)(nvmlDevice_t, int, int, unsigned long long*);
using DeviceGetRetiredPagesPendingStatusFn = nvmlReturn_t (*)(nvmlDevice_t, int*);
using DeviceGetRemappedRowsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*,
                                                 unsigned int*, unsigned int*);
using DeviceGetP2PStatusFn = nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int, int*);
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);
using DeviceRegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long, nvmlEventSet_t);
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);  // _v2
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);
}

}  // namespace atrium::nvml::api
