// From what NVML discovered (nvml/host.h) to the fleet's node record
// (model/records.h) and a health verdict per GPU. Pure: no I/O, no clock;
// the shell passes in what it read from NVML and the host.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "capacity/gpu_catalog.h"
#include "common/result.h"
#include "model/records.h"
#include "nvml/host.h"

namespace atrium::nvml {

// The catalog model of a GPU NVML names `nvml_name` with `memory_mib` of
// memory. The family is the word of the name that equals a catalog model's
// name up to its first '-' ("NVIDIA H100 80GB HBM3" and "NVIDIA H100 PCIe"
// are family H100, "Tesla V100-SXM2-32GB" V100, "NVIDIA A10" A10 — never
// A100); within the family, the model whose nominal memory the reported
// figure is within 85%..102% of (boards report a little less than the GB in
// their name: an H100 80GB reports 81,559 MiB, a T4 15,360). A model Atrium
// does not know ("NVIDIA H100 NVL" with 94 GB, "NVIDIA L40") is refused:
// InvalidArgument naming the NVML name, its memory and the known models.
Result<const capacity::GpuModel*> CatalogModelFor(std::string_view nvml_name, int64_t memory_mib);

// When a GPU counts as unhealthy.
struct HealthLimits {
  // Used when the GPU reports no slowdown threshold of its own.
  unsigned int fallback_max_temperature_c = 85;
  // A draw above the enforced limit by more than this is a failing power
  // brake, not load (a GPU at full load draws up to its limit).
  double max_power_over_limit = 1.10;
};

struct GpuVerdict {
  bool healthy = true;
  std::vector<std::string> reasons;  // why not, in words; empty when healthy

  bool operator==(const GpuVerdict&) const = default;
};

// The verdict for one GPU: unhealthy for any critical XID since discovery
// started, uncorrectable ECC errors since the driver loaded, pending page
// retirement or row remapping (both need a GPU reset), a failed row remap,
// a temperature at or above the slowdown threshold (or the fallback), or a
// power draw beyond the limit. A signal the GPU did not give adds nothing.
GpuVerdict JudgeGpuHealth(const DiscoveredGpu& gpu, const HealthLimits& limits = {});

// What the host itself has (read by the shell: sysconf, hostname).
struct NodeShape {
  std::string name;        // the node's name in the fleet
  int64_t cpu_milli = 0;   // online CPUs x 1000
  int64_t memory_mib = 0;  // physical memory
};

struct MappedGpu {
  unsigned int index = 0;
  std::string uuid;
  GpuVerdict verdict;
  // The MIG instances that exist now, as "<profile>@<start>" ("3g.40gb@4");
  // a profile id the catalog does not know reads "profile-<id>@<start>".
  std::vector<std::string> mig_instances;

  bool operator==(const MappedGpu&) const = default;
};

struct NodeMapping {
  FleetNodeRecord node;
  std::vector<MappedGpu> gpus;  // in index order

  bool operator==(const NodeMapping&) const = default;
};

// The fleet's node for the discovered host: every GPU of one catalog model
// (CatalogModelFor), the reported memory, MIG on where the driver says it is
// (off where it cannot say), healthy per JudgeGpuHealth, NVLink groups as
// discovered, in pool kDiscoveredPool and rack kDiscoveredRack.
// InvalidArgument: no GPU; an unknown model; GPUs of different models (a
// node is one model); MIG on for a model without MIG; an empty name; CPU or
// memory not positive.
Result<NodeMapping> MapHostToNode(const DiscoveredHost& host, const NodeShape& shape,
                                  const HealthLimits& limits = {});

// Where a discovered node lives: the same region, site and pool the
// simulated fleet uses (capacity/fleet_spec.h), so quotas and tiers set up
// under `atrium dev` hold on a real host.
inline constexpr std::string_view kDiscoveredRack = "rack-0";
inline constexpr std::string_view kDiscoveredSpecPrefix = "nvml:";

// A one-node fleet of `node`, its spec "nvml:<node name>" (what
// SchedulingService stores and `atrium capacity` shows).
FleetRecord FleetRecordForNode(const FleetNodeRecord& node);

}  // namespace atrium::nvml
