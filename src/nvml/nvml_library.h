// The NVML loader: opens libnvidia-ml with dlopen (no build-time
// dependency on NVIDIA's headers or libraries; nvml/nvml_api.h declares what
// is used), resolves its symbols and reads what this host's GPUs are.
//
// Required symbols (a library without one is refused, naming it):
// nvmlInit_v2, nvmlShutdown, nvmlErrorString, nvmlSystemGetDriverVersion,
// nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetName,
// nvmlDeviceGetUUID, nvmlDeviceGetMemoryInfo. Every other symbol is
// optional: an older driver without it still loads, the result lists it in
// `missing_symbols` and leaves out what it would have given.
//
// Every NVML failure becomes an Error whose message names the call, the GPU
// and NVML's own words (nvmlErrorString) with the numeric code.
//
// Not thread-safe: one thread uses an NvmlLibrary at a time.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "nvml/host.h"

namespace atrium::nvml {

// Where the real library is found on a host with NVIDIA's driver.
inline constexpr char kDefaultNvmlLibrary[] = "libnvidia-ml.so.1";

class NvmlLibrary {
 public:
  // Opens `path` (a bare file name is searched the way dlopen searches),
  // resolves the symbols and calls nvmlInit_v2. Registers for critical XID
  // events where the library offers them, so Discover() and PollXidErrors()
  // report XIDs from this moment on.
  // Errors: NotFound when the library cannot be opened (dlerror's words);
  // FailedPrecondition naming a required symbol the library lacks;
  // Unavailable (PermissionDenied for NVML_ERROR_NO_PERMISSION) when
  // nvmlInit_v2 fails, with NVML's words.
  static Result<std::unique_ptr<NvmlLibrary>> Open(const std::string& path);
  // Calls nvmlShutdown and closes the library.
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // Driver and CUDA versions, every GPU with its MIG state and health
  // signals, and NVLink groups. Errors: Unavailable (PermissionDenied) when
  // a call that every GPU must answer (count, handle, name, UUID, memory)
  // fails; a failing optional signal is listed in the GPU's `unavailable`.
  Result<DiscoveredHost> Discover();

  // Critical XIDs delivered since the last poll (or Open), by GPU index.
  // Empty when the library offers no events. Errors: Unavailable when the
  // wait itself fails (NVML_ERROR_GPU_IS_LOST, ...).
  Result<std::map<unsigned int, std::vector<unsigned long long>>> PollXidErrors();

 private:
  struct Symbols;
  NvmlLibrary(void* handle, std::unique_ptr<Symbols> symbols, std::vector<std::string> missing);
  Error NvmlError(const std::string& call, int rc) const;
  void RegisterXidEvents();

  void* handle_;
  std::unique_ptr<Symbols> symbols_;
  std::vector<std::string> missing_symbols_;
  void* event_set_ = nullptr;           // nvmlEventSet_t, when registered
  std::vector<std::string> xid_notes_;  // why XIDs are not watched, if they are not
};

// The CUDA driver version NVML reports (major * 1000 + minor * 10) as
// "major.minor"; "" for a non-positive value.
std::string CudaVersionText(int version);

}  // namespace atrium::nvml
