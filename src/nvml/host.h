// What NVML told us about this host's GPUs: plain values, filled by the
// loader (nvml/nvml_library.h) and read by the pure mapping
// (nvml/node_mapping.h). A signal the driver could not give is nullopt, and
// the reason is in `unavailable` (which symbol is missing, or NVML's words).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace atrium::nvml {

// One MIG GPU instance that exists now.
struct MigInstance {
  unsigned int id = 0;          // the instance id within its GPU
  unsigned int profile_id = 0;  // as `nvidia-smi mig -lgip` prints it (19 = 1g.10gb on H100)
  unsigned int start = 0;       // placement start on the 8 memory slots
  unsigned int size = 0;        // placement width in memory slots

  bool operator==(const MigInstance&) const = default;
};

struct GpuHealthSignals {
  // Critical XIDs delivered since the loader registered for them (events
  // are not kept by the driver from before that); empty when none arrived.
  std::vector<unsigned long long> xid_errors;
  std::optional<unsigned long long> ecc_uncorrected_volatile;  // since the driver loaded
  std::optional<bool> retired_pages_pending;                   // pre-Ampere page retirement
  std::optional<bool> remapped_rows_pending;                   // Ampere+ row remapping
  std::optional<bool> remapped_rows_failed;
  std::optional<unsigned int> temperature_c;
  std::optional<unsigned int> slowdown_temperature_c;
  std::optional<unsigned int> shutdown_temperature_c;
  std::optional<unsigned int> power_mw;
  std::optional<unsigned int> power_limit_mw;  // the enforced limit

  bool operator==(const GpuHealthSignals&) const = default;
};

struct DiscoveredGpu {
  unsigned int index = 0;  // NVML's enumeration index
  std::string name;        // "NVIDIA H100 80GB HBM3"
  std::string uuid;        // "GPU-..."
  int64_t memory_mib = 0;  // total, as reported
  // nullopt when the driver cannot say (no MIG support on this GPU or in
  // this driver).
  std::optional<bool> mig_enabled;
  std::vector<MigInstance> mig_instances;  // in profile, then id order
  GpuHealthSignals health;
  // Signals that could not be read, one line each ("ECC: nvmlDevice...
  // Not Supported").
  std::vector<std::string> unavailable;

  bool operator==(const DiscoveredGpu&) const = default;
};

struct DiscoveredHost {
  std::string driver_version;       // "550.54.15"
  std::string cuda_driver_version;  // "12.4"; "" when the driver cannot say
  std::vector<DiscoveredGpu> gpus;
  // GPU index groups connected by NVLink (pairwise P2P over NVLink,
  // transitively); empty when no GPU pair is, or the driver cannot say.
  std::vector<std::vector<int>> nvlink_groups;
  // Optional symbols the library does not export; what depends on them is
  // missing from the result (the loader degrades rather than fail).
  std::vector<std::string> missing_symbols;
  // Host-wide signals that could not be read.
  std::vector<std::string> unavailable;

  bool operator==(const DiscoveredHost&) const = default;
};

}  // namespace atrium::nvml
