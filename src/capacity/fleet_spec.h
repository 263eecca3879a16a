// The simulated fleet `atrium dev --fleet SPEC` starts with, from a short
// spec: comma-separated COUNTxMODELxGPUS items, e.g.
// "2xH100-80GBx8,1xA100-80GBx8,2xL40Sx4" = two 8-GPU H100 nodes, one 8-GPU
// A100-80GB node and two 4-GPU L40S nodes. Pure: no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "capacity/gpu_catalog.h"
#include "capacity/inventory.h"
#include "common/result.h"

namespace atrium::capacity {

inline constexpr std::string_view kDefaultDevFleetSpec = "2xH100-80GBx8,1xA100-80GBx8,2xL40Sx4";

// Limits on what a spec may ask for.
inline constexpr size_t kMaxFleetSpecLength = 4096;  // characters
inline constexpr int kMaxFleetSpecItems = 64;
inline constexpr int kMaxNodesPerFleetSpecItem = 10'000;
inline constexpr int kMaxFleetSpecNodes = 100'000;  // all items together
inline constexpr int kMaxGpusPerNode = 16;

// Where every simulated node lives.
inline constexpr std::string_view kSimulatedRegion = "local";
inline constexpr std::string_view kSimulatedSite = "local-1";
inline constexpr std::string_view kSimulatedPool = "default";  // labels: interactive, batch
inline constexpr int kSimulatedNodesPerRack = 4;               // racks have no power budget
// The GPU software every simulated node reports: the R550 production driver
// and the CUDA version it supports (NVIDIA's release notes: 550.54.15 ships
// with CUDA 12.4). Environment templates' minimums are checked against them;
// a real node reports its own through NVML.
inline constexpr std::string_view kSimulatedDriverVersion = "550.54.15";
inline constexpr std::string_view kSimulatedCudaVersion = "12.4";

// The host a simulated node of `gpus` GPUs of `model` gets. Figures are for
// an 8-GPU server of that generation, scaled linearly with the GPU count:
//   H100-80GB, H200-141GB  224 vCPU  2 TiB    (DGX H100/H200: 2x56-core Xeon, 2 TB)
//   A100-80GB              256 vCPU  2 TiB    (DGX A100 640GB: 2x64-core EPYC, 2 TB)
//   A100-40GB              256 vCPU  1 TiB    (DGX A100 320GB)
//   V100-16GB, V100-32GB    80 vCPU  512 GiB  (DGX-1: 2x20-core Xeon)
//   L40S                   192 vCPU  1.5 TiB  (AWS g6e.48xlarge)
//   L4, A10                192 vCPU  768 GiB  (AWS g6.48xlarge, g5.48xlarge)
//   T4                      96 vCPU  384 GiB  (AWS g4dn.metal)
// Idle power (host share + idle GPU, rough simulation figures, per GPU):
// H100/H200 300 W, A100 200 W, V100 125 W, L40S 110 W, A10 90 W, L4 60 W,
// T4 55 W. nullopt for a model without an entry (none in the catalog).
struct SimulatedNodeShape {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t idle_power_watts = 0;
};
std::optional<SimulatedNodeShape> SimulatedShapeFor(const GpuModel& model, int gpus);

// Builds the simulated fleet for `spec`: region "local", site "local-1", one
// pool "default" (labels interactive, batch), nodes in spec order named
// "<model in lower case>-<n>" with n counting per model across items
// ("h100-80gb-0", "h100-80gb-1", "l40s-0"), racks "rack-0", "rack-1", ... of
// 4 consecutive nodes each. NVLink: SXM models (A100, H100, H200, V100) get
// one group of all their GPUs; PCIe models (L40S, L4, T4, A10) have no NVLink
// bridges, so no groups. Models match ignoring case; whitespace around items
// is ignored. GPUs are whole (MIG off) and healthy; every node reports
// kSimulatedDriverVersion and kSimulatedCudaVersion.
// Errors (InvalidArgument, naming the offending item): empty spec or item,
// a malformed item, an unknown model (the message lists the known ones), a
// count or GPU number of zero or above the limits, a spec over the limits.
Result<Fleet> ParseFleetSpec(std::string_view spec);

}  // namespace atrium::capacity
