// Which fleet a starting control plane runs on: this host's GPUs found
// through NVML, or the simulated fleet ([fleet] in runtime/config.h). The
// shell around nvml::NvmlLibrary and the pure nvml::MapHostToNode: it reads
// the host's name, CPUs and memory, and logs its choice once.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "model/records.h"
#include "nvml/host.h"
#include "nvml/node_mapping.h"
#include "nvml/nvml_library.h"
#include "runtime/config.h"

namespace atrium {

struct FleetDiscovery {
  // Set: the one-node fleet of this host, to run on
  // (SchedulingOptions::fleet). Unset: the simulated fleet, as before.
  std::optional<FleetRecord> fleet;
  // What NVML reported, when it loaded and answered (driver and CUDA
  // versions, every GPU); set even when the simulated fleet was chosen.
  std::optional<nvml::DiscoveredHost> host;
  std::vector<nvml::MappedGpu> gpus;  // per GPU: UUID, verdict, MIG instances
  // The open library, while the host's fleet is used (for later health
  // checks); null otherwise.
  std::unique_ptr<nvml::NvmlLibrary> library;
  std::string summary;  // the one line logged: which fleet, and why
};

// Chooses the fleet as [fleet] discover says:
//  - "off": simulated.
//  - "auto": simulated when scheduler.fleet names a spec (the operator
//    asked for it); else the host's node when NVML loads, reports at least
//    one GPU and every GPU maps to a catalog model; else simulated, saying
//    why (no library, NVML's error, no GPU, an unknown model).
//  - "nvml": the host's node, or FailedPrecondition saying why not.
// The node is named fleet.node_name, or this host's name (InvalidArgument
// when that is no valid node name, ValidateNodeName).
Result<FleetDiscovery> DiscoverFleet(const Config& config);

}  // namespace atrium
